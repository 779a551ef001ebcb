"""Scripted hosts for guided runs: they answer pending items as the scripted provider would, at
the engine level (:func:`host_loop`) or through a real MCP client (:class:`GuidedHost`), plus
the corpus cases both levels walk and what they compare with ``prose run``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.server.mcpserver import MCPServer
from tests.conftest import no_sleep

from openprose.engine import ProviderError, ScriptedProvider, runner
from openprose.engine.interpreter import Options
from openprose.language import compile_or_raise
from openprose.mcp_server.guided import HostProvider, Item, ItemRefused, SessionItem
from openprose.mcp_server.server import server_context
from openprose.state import open_store

# Program name → script: failures where the program handles them, verdicts for its loops.
# Together: parallel all/first/any with a count and each on-fail policy (19), pipelines (21),
# try/catch (22), retry with backoff (23), choices and conditions (25), recursion (41), loops
# ended by judgments (20), inputs declared deep in the program (45, 47).
CASES = {
    # Latencies order the races of prose run the way the host answers: in branch order.
    "19-advanced-parallel.prose": {"sessions": [
        {"match": "Fast but might fail", "fail": 9, "error": "down", "latency": 0.02},
        {"match": "secondary API", "fail": 9, "error": "timeout"},
        {"match": "enrichment 2", "fail": 9, "error": "no data"},
        {"match": "approach A|creative", "latency": 0.02},
        {"match": "catchy", "latency": 0.04},
        {"match": "approach|headline|Slow but", "latency": 0.3}]},
    "21-pipeline-operations.prose": {},
    "22-error-handling.prose": {"sessions": [
        {"match": "external API|Parse and validate|risky inner|Service B", "fail": 9,
         "error": "boom"}]},
    "23-retry-with-backoff.prose": {"sessions": [{"match": "API|fetch|Fetch", "fail": 1}]},
    "25-conditionals.prose": {"conditions": [{"match": ".", "verdicts": [False, True]}],
                              "choices": [{"match": ".", "verdicts": []}]},
    "41-rlm-divide-conquer.prose": {"conditions": [{"match": ".", "verdicts": [False]}]},
    "20-fixed-loops.prose": {"conditions": [{"match": ".", "verdicts": [False, False, True]}]},
    # Inputs declared deep in the program, in a branch the run does not take (bound only
    # when reached), and an output in such a branch (47).
    "45-plugin-release.prose": {},
    "47-language-self-improvement.prose": {},
}


def sample_inputs(program_path: Path) -> dict[str, str]:
    program = compile_or_raise(program_path.read_text(encoding="utf-8"), str(program_path))
    return {decl.name: f"sample {decl.name}" for decl in program.inputs}


def corpus_job(path: Path, root: Path, **options: Any) -> runner.Job:
    """``prose run`` of a corpus program (sample inputs, no backoff sleeps)."""
    source = path.read_text(encoding="utf-8")
    program = compile_or_raise(source, str(path))
    knobs = {"sleep": no_sleep, "loop_limit": 50, "max_concurrency": 8, **options}
    return runner.Job(source=source, file=str(path), program=program, project_root=root,
                      inputs=sample_inputs(path), options=Options(**knobs))


def scripted(rules: dict) -> ScriptedProvider:
    return ScriptedProvider({"default_output": "done: first point", **rules})


def instant(rules: dict) -> dict:
    """The same answers without latencies (the host answers at once, in branch order)."""
    return {section: [{k: v for k, v in rule.items() if k != "latency"} for rule in entries]
            for section, entries in rules.items()}


def bindings_of(root: Path, run_id: str, backend: str = "filesystem") -> dict:
    with open_store(root, backend) as store:
        run = store.open_run(run_id)
        return {(b.name, b.execution_id): b.value for b in run.bindings()}


def call_counts(script: ScriptedProvider) -> dict:
    """How many sessions and judgments ended or failed, by kind and phase."""
    counts: dict = {}
    for call in script.calls:
        if call.phase in ("end", "fail"):
            counts[(call.kind, call.phase)] = counts.get((call.kind, call.phase), 0) + 1
    return counts


async def answer_items(host: HostProvider, script: ScriptedProvider, items: list) -> int:
    """Answer ``items`` one after the other (skipping any that ended meanwhile)."""
    answered = 0
    for item in items:
        if item.token not in host.pending:
            continue
        try:
            if isinstance(item, SessionItem):
                try:
                    result = await script.run_session(item.request, item.io)
                except ProviderError as err:
                    await host.fail_session(item.token, str(err), err.retryable)
                else:
                    await host.complete_session(item.token, result.output or "", result.summary)
            else:
                verdict = await script.judge(item.request)
                await host.submit_verdict(item.token, verdict.value, verdict.reason)
        except ItemRefused:
            continue
        answered += 1
    return answered


async def host_loop(host: HostProvider, script: ScriptedProvider, done: asyncio.Future,
                    reverse: bool = False) -> None:
    """Answer whatever is pending until ``done`` (the run) finishes."""
    while not done.done():
        items = await host.wait_for_items(0.05)
        fresh = [item for item in items if item.issued == 1]
        await answer_items(host, script, fresh[::-1] if reverse else fresh)


class Refused(AssertionError):
    """A tool call answered with is_error (the text is the reason)."""


class GuidedHost:
    """A host model played by a script, through a real MCP client: ``next_step`` for the
    pending items, ``write_binding``/``fail_session`` for sessions, ``submit_verdict`` for
    judgments. The answers are what ``script`` gives for the request the engine made (looked
    up in the server by token: the test's oracle, never a shortcut for a write)."""

    def __init__(self, client: Client, mcp: MCPServer, script: ScriptedProvider) -> None:
        self.client = client
        self.mcp = mcp
        self.script = script
        self.seen: set[str] = set()
        self.steps: list[dict[str, Any]] = []
        self.replies: list[dict[str, Any]] = []  # every write/verdict/fail confirmation

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, arguments)
        text = result.content[0].text if result.content else ""
        if result.is_error:
            raise Refused(f"{tool}: {text}")
        return {**(result.structured_content or {}), "_text": text}

    async def start(self, program: str, inputs: dict[str, str],
                    backend: str = "filesystem") -> tuple[str, str]:
        started = await self.call("start_run", program=program, inputs=inputs,
                                  backend=backend, mode="guided")
        return started["run_id"], started["vm_token"]

    async def walk(self, vm_token: str, reverse: bool = False, stop_after: int | None = None
                   ) -> dict[str, Any]:
        """Step the run until it ends (or ``stop_after`` items were answered): the last
        next_step result."""
        answered = 0
        while True:
            step = await self.call("next_step", vm_token=vm_token, wait_s=5.0)
            self.steps.append(step)
            if step["status"] != "running":
                return step
            fresh = [item for item in step.get("pending", []) if item["token"] not in self.seen]
            self.seen.update(item["token"] for item in fresh)
            for item in fresh[::-1] if reverse else fresh:
                if stop_after is not None and answered >= stop_after:
                    return step
                answered += await self.answer(item)

    def engine_item(self, token: str) -> Item | None:
        """The engine's request behind a pending token, while it still waits."""
        engines = server_context(self.mcp).modes["guided"].modes.engines  # type: ignore[attr-defined]
        run = engines.owner_of(token)
        item = run.host.pending.get(token) if run is not None and run.host else None
        return item if item is not None and not item.future.done() else None

    async def answer(self, item: dict[str, Any]) -> int:
        engine_item = self.engine_item(item["token"])
        if engine_item is None:  # a join settled without it
            return 0
        try:
            if isinstance(engine_item, SessionItem):
                await self._session(item, engine_item)
            else:
                verdict = await self.script.judge(engine_item.request)
                self.replies.append(await self.call(
                    "submit_verdict", token=item["token"], value=verdict.value,
                    reason=verdict.reason))
        except Refused as refused:
            if "no longer needs it" not in str(refused):
                raise
            return 0
        return 1

    async def _session(self, item: dict[str, Any], engine_item: SessionItem) -> None:
        request = engine_item.request
        assert set(item) <= {"kind", "token", "binding", "agent", "model", "attempt",
                             "start"}
        brief = await self.call("get_brief", token=item["token"])  # the subagent's first call
        assert brief["task"] == request.prompt.strip() and brief["attempt"] == request.attempt
        assert [c["name"] for c in brief.get("context", [])] == [c.name for c in request.context]
        for context in request.context:  # what a subagent reads, through its token
            read = await self.call("read_binding", token=item["token"], name=context.name,
                                   limit=1_000_000)
            if context.text != "(no value)":  # a name not bound (yet): a join's loser, a seed
                assert read["value"] == context.text, (read, context)
        try:
            result = await self.script.run_session(request, engine_item.io)
        except ProviderError as err:
            self.replies.append(await self.call("fail_session", token=item["token"],
                                                error=str(err), retryable=err.retryable))
            return
        self.replies.append(await self.call("write_binding", token=item["token"],
                                            value=result.output or "",
                                            summary=result.summary or "done"))
