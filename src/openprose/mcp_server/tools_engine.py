"""Runs the engine drives inside the server, and their tools.

Guided runs (``start_run(mode="guided")``): the interpreter runs here on a
:class:`~openprose.mcp_server.guided.HostProvider`; the host takes pending items with
``next_step``, completes sessions with ``write_binding`` and fails them with ``fail_session``
(their ``gs_`` tokens are routed here), and answers judgments with ``submit_verdict``.

Delegated runs (``run_program``): the whole program runs here on a provider the server has
(``anthropic``, ``sampling`` through the client's model, or ``scripted`` from a file), with
progress notifications; ``get_run``, ``cancel_run``, ``list_runs`` and ``compile_program``
serve both kinds. ``resume_run`` (in :mod:`tools_runs`) continues either kind the way it
was started, through the modes registered here.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import AcceptedElicitation, ElicitationResult
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field, create_model

from openprose.engine import EngineError, Provider, ProviderUnavailable
from openprose.engine import inputs as input_rules
from openprose.engine.briefs import host_model
from openprose.engine.errors import ImportFailed
from openprose.engine.events import Event
from openprose.engine.permissions import Consent, Grants
from openprose.engine.runner import (
    Job,
    load_imports,
    make_provider,
    record_given,
    run_inputs,
    set_budget,
)
from openprose.language import nodes as n
from openprose.language.analysis import Analysis, analyze
from openprose.mcp_server.briefing import HOST_TOOLS, JUDGE, brief_reply, start_line
from openprose.mcp_server.consent import elicit_consent
from openprose.mcp_server.context import ServerContext
from openprose.mcp_server.engine_results import (
    CancelResult,
    CompileReport,
    ContextRef,
    DiagnosticInfo,
    FailAck,
    NextStep,
    PendingItem,
    ProgressInfo,
    RunEntry,
    RunList,
    RunReport,
    VerdictAck,
    compact,
)
from openprose.mcp_server.engine_runs import EngineRun, EngineRuns, prepare
from openprose.mcp_server.guided import (
    JUDGMENT_PREFIX,
    HostProvider,
    Item,
    ItemRefused,
    SessionItem,
    is_guided_token,
)
from openprose.mcp_server.prompts import PromptError
from openprose.mcp_server.prompts import compiled as compiled_program
from openprose.mcp_server.refusal import Refusal
from openprose.mcp_server.results import (
    OutputRef,
    ReadResult,
    WriteResult,
    compile_errors,
    run_outputs,
)
from openprose.mcp_server.runs import DRIVER_KEY, ENGINE, GUIDED, DrivenRun
from openprose.mcp_server.sampling import SamplingProvider
from openprose.mcp_server.tools_runs import driver_of, drives, record_driver
from openprose.paths import PathRefused, contained
from openprose.state import StateError, settings
from openprose.state.config import postgres_url
from openprose.state.view import run_usage

DELEGATED = "delegated"
#: Journal record of how a delegated run was started (provider, script, concurrency).
DELEGATION_KEY = "mcp:delegated"
GUIDED_CONCURRENCY = 8
DEFAULT_WAIT = 5.0
MAX_WAIT = 60.0
#: Seconds between progress notifications at most (a fast run is not one per statement).
PROGRESS_INTERVAL = 0.05
Backend = Literal["filesystem", "sqlite", "postgres"]
ProviderName = Literal["anthropic", "sampling", "scripted"]


class EngineModes:
    """The engine runs of one server, and the run modes that start and resume them."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.engines = EngineRuns()
        self.guided = GuidedMode(self)
        self.delegated = DelegatedMode(self)

    async def launch(self, run_id: str, mode: str, provider: Provider, backend: str,
                     concurrency: int, consent: Consent | None = None) -> EngineRun:
        """Start (or continue) ``run_id`` in the engine; finished work is reused."""
        old = self.engines.get(run_id)
        if old is not None:
            await old.cancel()
        try:
            job = await asyncio.to_thread(prepare, run_id, self.ctx.project_root, backend,
                                          concurrency)
        except EngineError as err:
            await provider.aclose()
            raise ToolError(f"run {run_id} cannot be continued: {err}") from None
        run = self.engines.add(EngineRun(run_id, mode, provider, job, on_end=self._ended,
                                         consent=consent))
        run.start()
        return run

    async def _ended(self, run: EngineRun) -> None:
        self.ctx.registry.forget(run.run_id)  # reload its state on the next call
        self.ctx.catalog.release(run.run_id)  # closing is quick: no worker thread
        with contextlib.suppress(Exception):  # a notification never fails the run
            await self.ctx.changed(run.run_id)

    def item_owner(self, token: str) -> tuple[EngineRun, HostProvider]:
        run = self.engines.owner_of(token)
        if run is None or run.host is None:
            raise Refusal("a pending item is completed with the token next_step gave",
                          "unknown token (pending items issued before a server restart are "
                          "issued again with new tokens: call next_step)")
        return run, run.host

    async def aclose(self) -> None:
        await self.engines.aclose()


class GuidedMode:
    """``start_run(mode="guided")``: the engine runs the program; the host answers."""

    def __init__(self, modes: EngineModes) -> None:
        self.modes = modes

    async def started(self, ctx: ServerContext, driven: DrivenRun) -> str | None:
        missing = _missing(driven)
        if missing:
            return ("guided: waiting for inputs " + ", ".join(missing) + "; give them with "
                    "resume_run(run_id, inputs={...}) to start")
        await self.start_engine(driven)
        return ("guided: the server runs the program; call next_step(vm_token) for the "
                "sessions and judgments it needs, and complete each with its token")

    async def start_engine(self, driven: DrivenRun) -> EngineRun:
        return await self.modes.launch(driven.id, GUIDED, HostProvider(driven.id),
                                       driven.backend, GUIDED_CONCURRENCY)

    async def resumed(self, ctx: ServerContext, driven: DrivenRun, client: Context
                      ) -> str | None:
        live = self.modes.engines.get(driven.id)
        if live is not None and live.live:
            return "guided: the engine is running; next_step lists what is pending"
        missing = _missing(driven)
        if missing:
            return "guided: still waiting for inputs " + ", ".join(missing)
        await self.start_engine(driven)
        return ("guided: the engine continues the run (finished sessions and verdicts are "
                "reused); call next_step(vm_token)")


class DelegatedMode:
    """``run_program``: the engine runs the program on a provider the server has."""

    def __init__(self, modes: EngineModes) -> None:
        self.modes = modes

    async def started(self, ctx: ServerContext, driven: DrivenRun) -> str | None:
        raise Refusal("delegated runs are started with run_program", "use run_program")

    async def resumed(self, ctx: ServerContext, driven: DrivenRun, client: Context
                      ) -> str | None:
        """``client``: the resuming call's client, whose model a run on sampling asks."""
        live = self.modes.engines.get(driven.id)
        if live is not None and live.live:
            return "delegated: the engine is running it; get_run(run_id) shows where"
        missing = _missing(driven)
        if missing:
            return "delegated: still waiting for inputs " + ", ".join(missing)
        record = driven.run.journal(DELEGATION_KEY)
        meta = dict(record.meta) if record is not None else {}
        provider = build_provider(meta.get("provider", "anthropic"), meta.get("script"),
                                  ctx.project_root, client)
        await self.modes.launch(driven.id, DELEGATED, provider, driven.backend,
                                int(meta.get("max_concurrency", 16)))
        return f"delegated: the engine continues the run on {provider.name}; get_run(run_id)"


def _missing(driven: DrivenRun) -> list[str]:
    """The inputs the engine needs before it starts (engine.inputs: up front and not
    optional) that the run has no value for."""
    program = driven.outline.program
    assert program is not None
    return [name for name, _ in input_rules.missing(program, run_inputs(driven.run, program))]


class GuidedRoute:
    """write_binding, read_binding and memory calls with a guided session token."""

    def __init__(self, modes: EngineModes) -> None:
        self.modes = modes

    def owns(self, token: str) -> bool:
        return isinstance(token, str) and is_guided_token(token)

    async def brief(self, token: str) -> CallToolResult:
        _, host = self.modes.item_owner(token)
        try:
            item = host.session_item(token)
        except ItemRefused as err:
            raise Refusal("a session's brief is read with its live token", str(err)) from None
        return brief_reply(item.brief, token, HOST_TOOLS)

    def binding(self, token: str) -> str | None:
        _, host = self.modes.item_owner(token)
        return host.binding_of(token)

    async def write(self, token: str, value: str, summary: str | None) -> CallToolResult:
        run, host = self.modes.item_owner(token)
        try:
            written = await host.complete_session(token, value, summary or "")
        except ItemRefused as err:
            raise Refusal("a guided session's token writes its binding once", str(err)) from None
        result = WriteResult(binding=written.binding, location=written.location,
                             execution_id=None, bytes=written.size, summary=written.summary or None)
        await self.modes.ctx.changed(run.run_id, [written.binding])
        return compact(result, f"written: {written.binding} ({written.size} bytes) at "
                               f"{written.location}")

    async def read(self, token: str, name: str, offset: int, limit: int) -> CallToolResult:
        _, host = self.modes.item_owner(token)
        if token.startswith(JUDGMENT_PREFIX):
            try:
                value = host.read_for_judgment(token, name)
            except ItemRefused as err:
                raise Refusal("a judgment reads the bindings it lists", str(err)) from None
            return _read_result(name, value, offset, limit)
        try:
            io = host.session_io(token)
            allowed = {item.name for item in host.context_names(token)}
            if name not in allowed:
                raise ItemRefused(f"'{name}' is not in this session's context (it has: "
                                  f"{', '.join(sorted(allowed)) or 'none'})")
            value = await asyncio.to_thread(io.read_context, name)
        except ItemRefused as err:
            raise Refusal("a session reads only the bindings it was given as context",
                          str(err)) from None
        except StateError as err:
            raise ToolError(f"read_binding: {err}") from None
        return _read_result(name, value, offset, limit)

    async def fail(self, token: str, error: str, retryable: bool) -> CallToolResult:
        _, host = self.modes.item_owner(token)
        try:
            next_move = await host.fail_session(token, error, retryable)
        except ItemRefused as err:
            raise Refusal("a pending session is failed once, with its token", str(err)) from None
        return compact(FailAck(token=token, next=next_move), next_move)

    async def read_memory(self, token: str) -> str | None:
        _, host = self.modes.item_owner(token)
        return await asyncio.to_thread(self._io(host, token).read_memory)

    async def write_memory(self, token: str, text: str) -> None:
        _, host = self.modes.item_owner(token)
        await asyncio.to_thread(self._io(host, token).write_memory, text)

    async def memory_owner(self, token: str) -> tuple[str, str]:
        _, host = self.modes.item_owner(token)
        try:
            return await asyncio.to_thread(self._io(host, token).memory_owner)
        except StateError as err:
            raise ToolError(f"read_memory: {err}") from None

    @staticmethod
    def _io(host: HostProvider, token: str) -> Any:
        try:
            return host.session_io(token)
        except ItemRefused as err:
            raise Refusal("a guided session's memory is reached with its live token",
                          str(err)) from None


async def _cancel_queued(root: Path, run_id: str) -> str | None:
    """Cancel ``run_id`` in the workers' queue (``prose run --detach``): "interrupted" when it
    was still queued, "cancelling" when its worker is told to stop; None when it is no
    queued run (or the workers extra or PostgreSQL is missing)."""
    if importlib.util.find_spec("procrastinate") is None or not postgres_url(root):
        return None
    from openprose.workers.queue import cancel

    try:
        outcome = await asyncio.to_thread(cancel, root, run_id)
    except StateError:
        return None
    return {"queued": "interrupted", "running": "cancelling"}.get(outcome)


def _read_result(name: str, value: str, offset: int, limit: int) -> CallToolResult:
    part = value[offset:offset + limit]
    end = offset + len(part)
    result = ReadResult(name=name, execution_id=None, kind="context", value=part,
                        offset=offset, total_chars=len(value),
                        next_offset=end if end < len(value) else None)
    return compact(result, part)


def build_provider(name: str, script: str | None, root: Path, client: Context | None
                   ) -> Provider:
    """A provider this server has, or a refusal saying what to configure instead."""
    if name == "scripted":
        try:
            return make_provider("scripted", script_path(script, root), root.resolve())
        except ProviderUnavailable as err:
            raise ToolError(f"run_program: {err}") from None
    if name == "sampling":
        if client is None or not can_sample(client):
            raise ToolError(
                "run_program: provider 'sampling' needs a client that declares sampling and "
                "keeps a connection the server can ask on (the 2025-11-25 protocol); use "
                "provider 'anthropic', or start_run(mode=\"guided\") and answer the sessions "
                "yourself")
        caps = client.client_capabilities
        tools = caps is not None and caps.sampling is not None and caps.sampling.tools is not None
        return SamplingProvider(client.session, tools=tools)
    try:
        return make_provider("anthropic", None, root)
    except ProviderUnavailable:
        raise ToolError(
            "run_program: no model provider is available: set ANTHROPIC_API_KEY in the "
            "server's environment or in .prose/.env, or use provider 'sampling' from a client "
            "that supports sampling, or start_run(mode=\"guided\") and answer the sessions "
            "yourself") from None


def script_path(script: str | None, root: Path) -> Path:
    """A scripted provider's script: one the user placed in the project (nothing under
    .prose/, which tools write)."""
    if not script:
        raise ToolError("run_program: provider 'scripted' needs script (a YAML or JSON "
                        "file in the project)")
    project = root.resolve()
    try:
        return contained(script, [project], base=project, what="script",
                         excluded=[project / ".prose"], within="the project")
    except PathRefused as err:
        raise ToolError(f"run_program: {err}") from None


async def queue_run(source: str, path: str | None, program: n.Program, given: dict[str, str],
                    backend: str, provider: str, script: str | None, max_concurrency: int,
                    root: Path) -> str:
    """``run_program`` on a server set up for workers: queue the run as ``prose run
    --detach`` does (the consent and budget the settings give, nobody to ask); its id."""
    from openprose.workers.queue import enqueue

    if backend != "postgres":
        raise ToolError(f"run_program: this server queues runs for workers: state "
                        f"'{backend}' cannot be queued; use postgres")
    if provider == "sampling":
        raise ToolError("run_program: a worker cannot reach your model: provider "
                        "'sampling' needs a server not set up for workers (prose serve "
                        "without --workers)")
    try:
        imports = await asyncio.to_thread(load_imports, program, path, root)
    except ImportFailed as err:
        raise ToolError(f"run_program: {err}") from None
    job = Job(source=source, file=path or "", program=program, project_root=root,
              backend=backend, inputs=dict(given), imports=imports)
    job.settings = {"provider": provider, "max_concurrency": max_concurrency,
                    "script": str(script_path(script, root)) if provider == "scripted"
                    else None}
    try:
        set_budget(job)  # the settings' (OPENPROSE_MAX_TOKENS, OPENPROSE_MAX_COST)
        run_id, _ = await asyncio.to_thread(enqueue, job, Grants.from_settings(settings(root)))
    except (StateError, EngineError) as err:
        raise ToolError(f"run_program: {err}") from None
    return run_id


def can_sample(client: Context) -> bool:
    caps = client.client_capabilities
    if caps is None or caps.sampling is None:
        return False
    return bool(getattr(client.session, "can_send_request", True)) and not _stateless(client)


def _stateless(client: Context) -> bool:
    version = client.protocol_version or ""
    return version >= "2026-07-28"


async def _program(program: str, root: Path) -> tuple[str, str | None, n.Program]:
    try:
        source, path, compiled = await compiled_program(program, root)
    except (PromptError, OSError, UnicodeDecodeError) as exc:
        raise ToolError(f"program: {exc}") from None
    if not compiled.ok or compiled.program is None:
        raise ToolError(compile_errors(compiled.errors))
    return source, path, compiled.program


async def ask_inputs(program: str, inputs: dict[str, str] | None, context: Context
                     ) -> Elicit[BaseModel] | dict[str, Any]:
    """run_program's missing inputs: asked for by elicitation when the client can answer
    (in either protocol era), otherwise left for the tool to list."""
    root = context.request_context.lifespan_context.project_root
    try:
        _, _, parsed = await _program(program, root)
    except ToolError:
        return {}
    missing = input_rules.missing(parsed, dict(inputs or {}))
    caps = context.client_capabilities
    if not missing or caps is None or caps.elicitation is None:
        return {}
    fields: dict[str, Any] = {name: (str, Field(description=text or name))
                              for name, text in missing}
    schema = create_model("ProgramInputs", **fields)
    return Elicit("The program needs these inputs to run:", schema)


def _item(item: Item) -> PendingItem:
    if isinstance(item, SessionItem):
        request = item.request
        return PendingItem(kind="session", token=item.token,
                           binding=request.binding or "(anonymous)", agent=request.agent,
                           model=(model := host_model(request.model)),
                           attempt=request.attempt if request.attempt > 1 else None,
                           start=start_line(model))
    judged = item.request
    return PendingItem(kind="judgment", token=item.token, condition=judged.text,
                       options=list(judged.options) or None,
                       context=[ContextRef(name=c.name, kind=c.kind or None,
                                           chars=len(c.text) if c.size is None else c.size,
                                           preview=c.text or None)
                                for c in judged.context] or None,
                       program=judged.program or None,
                       round=judged.round or None, start=JUDGE)



def register(mcp: MCPServer, ctx: ServerContext, modes: EngineModes) -> None:
    ctx.modes[GUIDED] = modes.guided
    ctx.modes[DELEGATED] = modes.delegated
    ctx.session_routes.append(GuidedRoute(modes))
    catalog = ctx.catalog

    def outputs_of(run_id: str, outline: Analysis) -> list[OutputRef]:
        try:
            run = catalog.open(run_id)
        except Exception:  # the run's store is gone: references cannot be given
            return []
        return run_outputs(run, outline)

    def report(run: EngineRun) -> RunReport:
        outcome = run.outcome
        result = RunReport(run_id=run.run_id, mode=run.mode, status=run.status,
                           backend=run.job.backend, provider=run.provider.name,
                           progress=ProgressInfo.of(run.progress))
        if outcome is not None:
            result.sessions, result.reused = outcome.sessions, outcome.reused
            result.tokens, result.cost_usd = outcome.tokens, round(outcome.cost_usd, 6)
            result.error = outcome.error
            if outcome.status == "completed":
                result.outputs = outputs_of(run.run_id,
                                            analyze(run.job.program, run.job.source))
            elif outcome.status == "interrupted":
                result.hint = "resume_run(run_id) continues it"
        return result

    def report_text(result: RunReport) -> str:
        lines = [f"run {result.run_id}: {result.status} ({result.mode}"
                 + (f", {result.provider}" if result.provider else "") + ")"]
        if result.progress is not None:
            p = result.progress
            lines.append(f"at line {p.line}: {p.statement} · sessions {p.sessions_done} done, "
                         f"{p.sessions_in_flight} in flight, {p.sessions_reused} reused")
        if result.tokens is not None:
            lines.append(f"sessions {result.sessions}, reused {result.reused}, tokens "
                         f"{result.tokens}, cost ${result.cost_usd}")
        lines += [f"output {o.name}: {o.location}" for o in result.outputs or ()]
        if result.error:
            lines.append(f"error: {result.error}")
        for entry in result.missing_inputs or ():
            lines.append(f"missing input {entry['name']}: {entry['description']}")
        if result.hint:
            lines.append(result.hint)
        return "\n".join(lines)

    # ----------------------------------------------------------------------- guided

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def next_step(vm_token: str, wait_s: float = DEFAULT_WAIT
                        ) -> Annotated[CallToolResult, NextStep]:
        """Guided runs: what is pending (sessions: a handle per subagent; judgments) or the
        final status. Waits up to wait_s."""
        driven = ctx.registry.by_vm_token(vm_token)
        if driven.mode != GUIDED:
            raise Refusal("next_step steps guided runs",
                          f"run {driven.id} is a {driven.mode} run")
        run = modes.engines.get(driven.id)
        if run is None:
            if driven.run.status != "running":
                return finished(driven.id, driven.run.status, None, driven)
            missing = _missing(driven)
            if missing:
                result = NextStep(run_id=driven.id, status="waiting for inputs",
                                  missing_inputs=missing)
                return compact(result, "waiting for inputs " + ", ".join(missing)
                               + ": resume_run(run_id, inputs={...})")
            run = await modes.guided.start_engine(driven)  # the server restarted: continue
        assert run.host is not None
        items = await run.host.wait_for_items(min(max(wait_s, 0.0), MAX_WAIT))
        if not items and not run.live:
            return finished(driven.id, run.status, run, driven)
        pending = [_item(item) for item in items]
        result = NextStep(run_id=driven.id, status="running", pending=pending)
        head = (f"run {driven.id}: running · line {run.progress.line}: "
                f"{run.progress.statement} · {len(pending)} pending")
        if not pending:
            head += " (nothing new yet: call next_step again)"
        return compact(result, "\n\n".join([head, *(item.text() for item in pending)]))

    def finished(run_id: str, status: str, run: EngineRun | None,
                 driven: DrivenRun) -> CallToolResult:
        error = run.outcome.error if run is not None and run.outcome is not None else None
        outputs = outputs_of(run_id, driven.outline) if status == "completed" else None
        result = NextStep(run_id=run_id, status=status, outputs=outputs, error=error)
        lines = [f"run {run_id}: {status}"]
        lines += [f"output {o.name}: {o.location}" for o in outputs or ()]
        if error:
            lines.append(f"error: {error}")
        if status == "interrupted":
            lines.append("resume_run(run_id) continues it")
        return compact(result, "\n".join(lines))

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def submit_verdict(token: str, value: bool | str, reason: str = ""
                             ) -> Annotated[CallToolResult, VerdictAck]:
        """Guided runs: answer a judgment (true/false, or one of its options) with a short
        reason."""
        _, host = modes.item_owner(token)
        try:
            verdict = await host.submit_verdict(token, value, reason)
        except ItemRefused as err:
            raise Refusal("a judgment is answered once, with a verdict of its kind",
                          str(err)) from None
        return compact(VerdictAck(token=token, value=verdict, recorded=True),
                       f"recorded: {verdict}")

    # ----------------------------------------------------------------------- delegated

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False, open_world_hint=True))
    async def run_program(
        program: str, context: Context,
        asked: Annotated[ElicitationResult[BaseModel], Resolve(ask_inputs)],
        inputs: dict[str, str] | None = None, state: Backend = ctx.default_backend,
        provider: ProviderName | None = None, max_concurrency: int = 16, wait: bool = True,
        script: str | None = None,
    ) -> Annotated[CallToolResult, RunReport]:
        """Run a program in the server: anthropic (its key), sampling (your model) or
        scripted (script: a file). wait=false: return at once (then get_run). Missing inputs
        are asked for or listed."""
        given = dict(inputs or {})
        if isinstance(asked, AcceptedElicitation):
            data = asked.data
            if isinstance(data, BaseModel):
                given.update({k: str(v) for k, v in data.model_dump().items()})
        source, path, parsed = await _program(program, ctx.project_root)
        missing = input_rules.missing(parsed, given)
        if missing:
            result = RunReport(run_id="", mode=DELEGATED, status="needs inputs", backend=state,
                               missing_inputs=[{"name": k, "description": v}
                                               for k, v in missing],
                               hint="call run_program again with inputs={name: value}")
            return compact(result, report_text(result))
        if max_concurrency < 1:
            raise ToolError("run_program: max_concurrency is at least 1")
        if ctx.workers:
            queued = RunReport(
                run_id=await queue_run(source, path, parsed, given, state,
                                       provider or "anthropic", script, max_concurrency,
                                       ctx.project_root),
                mode=ENGINE, status="queued", backend=state, provider=provider or "anthropic",
                hint="queued for prose worker: get_run(run_id) follows it, cancel_run stops it")
            return compact(queued, report_text(queued))
        name = provider or ("sampling" if can_sample(context)
                            and not settings(ctx.project_root).get("ANTHROPIC_API_KEY")
                            else "anthropic")
        engine = build_provider(name, script, ctx.project_root, context)
        try:
            store = catalog.store(state)
            created = store.create_run(source, path)
        except StateError as exc:
            await engine.aclose()
            raise ToolError(f"run_program: the {state} state backend: {exc}") from None
        record_given(created, given)  # each is bound when the program reaches it
        created.record_result(DELEGATION_KEY, status="delegated",
                              meta={"provider": name, "script": script,
                                    "max_concurrency": max_concurrency})
        created.record_result(DRIVER_KEY, status="driver", meta={"mode": DELEGATED})
        ctx.registry.get(created.id).driver = driver_of(context)
        run = await modes.launch(created.id, DELEGATED, engine, store.kind, max_concurrency,
                                 elicit_consent(context) if wait else None)
        if not wait:
            result = report(run)
            result.hint = "get_run(run_id) shows its progress; cancel_run(run_id) stops it"
            return compact(result, report_text(result))
        try:
            await follow(run, context)
        finally:  # nobody answers once this call has returned
            run.consent = None
        result = report(run)
        return compact(result, report_text(result))

    async def follow(run: EngineRun, context: Context) -> None:
        """Wait for the run, notifying progress as statements start and sessions end."""
        changed = asyncio.Event()

        def note(event: Event) -> None:
            if event.kind in ("statement", "session_end", "verdict"):
                changed.set()

        run.watchers.append(note)
        sent = 0
        last = None
        try:
            while not run.finished.is_set():
                waits = [asyncio.ensure_future(changed.wait()),
                         asyncio.ensure_future(run.finished.wait())]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for waiter in waits:
                    waiter.cancel()
                changed.clear()
                now = run.progress.line_text()
                if now != last and not run.finished.is_set():
                    sent, last = sent + 1, now
                    with contextlib.suppress(Exception):  # the client may not listen
                        await context.report_progress(sent, None, now)
                await asyncio.sleep(PROGRESS_INTERVAL)
        finally:
            run.watchers.remove(note)

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_run(run_id: str) -> Annotated[CallToolResult, RunReport]:
        """A run's status, position, outputs, sessions and cost."""
        run = modes.engines.get(run_id)
        if run is not None:
            result = report(run)
            return compact(result, report_text(result))
        driven = ctx.registry.get(run_id)
        def fresh() -> tuple[Any, Any]:  # afresh: a worker may drive it; imports counted
            record = driven.run.backend.load_run(run_id)
            return record, run_usage(driven.run.store, record)

        record, totals = await asyncio.to_thread(fresh)
        status = record.status
        result = RunReport(run_id=run_id, mode=driven.mode, status=status,
                           backend=driven.backend, sessions=totals.sessions,
                           tokens=totals.input_tokens + totals.output_tokens,
                           cost_usd=round(totals.cost_usd, 6),
                           outputs=outputs_of(run_id, driven.outline) or None)
        if status in ("running", "interrupted") and driven.mode in (GUIDED, DELEGATED):
            result.hint = "not running in this server: resume_run(run_id) continues it"
        return compact(result, report_text(result))

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def cancel_run(run_id: str, context: Context, vm_token: str = "",
                         take_over: bool = False) -> Annotated[CallToolResult, CancelResult]:
        """Stop a run driven here or queued for workers (resume_run continues it); another
        client's: its vm_token or take_over."""
        run = modes.engines.get(run_id)
        if run is None or not run.live:
            queued = await _cancel_queued(ctx.project_root, run_id)
            if queued is not None:
                return compact(CancelResult(run_id=run_id, status=queued),
                               f"run {run_id}: {queued}; resume_run(run_id) continues it")
            raise Refusal("cancel_run stops a run the engine is driving in this server or "
                          "one queued for workers", f"run {run_id} is neither")
        driven = ctx.registry.get(run_id)
        taken = not drives(driven, context, vm_token)
        if taken and not take_over:
            holder = driven.driver.client if driven.driver else "another client"
            raise Refusal("a run another client drives is stopped or taken over only "
                          "explicitly", f"run {run_id} is driven by {holder}; give its "
                          "vm_token, or take_over=true (the journal records who took it)")
        if taken:  # the caller drives it from now: its resume_run needs no take_over
            record_driver(driven, driven.mode, context, taking_over=True)
        await run.cancel()
        return compact(CancelResult(run_id=run_id, status=run.status),
                       f"run {run_id}: {run.status}; resume_run(run_id) continues it"
                       + (f" (taken over by {driven.driver.client})" if taken and driven.driver
                          else ""))

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def list_runs(limit: int = 20) -> Annotated[CallToolResult, RunList]:
        """The project's recent runs, newest first."""
        entries = [RunEntry(run_id=str(r["id"]), status=str(r["status"]),
                            program=r["program"] and str(r["program"]),
                            backend=str(r["backend"]), started=r["started"] and str(r["started"]))
                   for r in catalog.recent(max(1, min(limit, 200)))]
        text = "\n".join(f"{e.run_id} {e.status} {e.backend} {e.program or '(inline)'}"
                         for e in entries) or "no runs yet"
        return compact(RunList(runs=entries), text)

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def compile_program(program: str) -> Annotated[CallToolResult, CompileReport]:
        """Check a program (a .prose path or source): its diagnostics."""
        try:
            source, _, compiled = await compiled_program(program, ctx.project_root)
        except (PromptError, OSError, UnicodeDecodeError) as exc:
            raise ToolError(f"compile_program: {exc}") from None
        diagnostics = [DiagnosticInfo.model_validate({**d.to_dict(),
                                                      "file": d.file or "<program>"})
                       for d in compiled.diagnostics]
        text = "\n".join(d.format(source).split("\n")[0] for d in compiled.diagnostics)
        return compact(CompileReport(ok=compiled.ok, diagnostics=diagnostics),
                       text or "no diagnostics: the program compiles")
