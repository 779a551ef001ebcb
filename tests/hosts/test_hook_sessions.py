"""The Claude Code hook fails closed for anything that is, or claims to be, an OpenProse
session. Each case is an attack that once fell through to the host: events shaped as Claude
Code sends them (the subagent's transcript beside the main one) for sessions of a real run
started and spawned through the MCP server."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mcp import Client
from tests.hosts.claude_code import PROSE, TOOL_PREFIX
from tests.hosts.host_model import SESSION_AGENT

from openprose.engine.host_hook import decide
from openprose.mcp_server.server import create_server
from openprose.state import open_store

PROGRAM = """\
agent reader:
  prompt: "You read the docs."
  permissions:
    read: ["docs/**"]
    write: ["docs/**"]
    bash: deny
    network: deny
parallel:
  notes = session: reader
    prompt: "Summarize the docs"
  other = session "Say hi"
"""
#: A well-formed session token no run issued.
UNKNOWN = "ses_" + "A" * 32


class Sessions:
    """A project with a run of PROGRAM whose two sessions are spawned (``notes``: may read
    and write docs/ only; ``other``: the defaults), and the subagents Claude Code ran."""

    def __init__(self, tmp: Path, client: Client, started: dict[str, Any]) -> None:
        self.project = tmp / "project"
        self.main = tmp / "transcripts" / "main.jsonl"
        self.client = client
        self.run_id, self.vm_token = started["run_id"], started["vm_token"]
        #: binding → its session statement's id, and its session's token once spawned
        self.statements = {item["binds"]: item["id"] for item in started["outline"]
                           if item["kind"] == "session"}
        self.tokens: dict[str, str] = {}

    def subagent(self, agent_id: str, prompt: str) -> str:
        """A subagent whose first message is ``prompt``."""
        folder = self.main.with_suffix("") / "subagents"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"agent-{agent_id}.jsonl").write_text(json.dumps(
            {"type": "user", "message": {"role": "user", "content": prompt}}) + "\n")
        return agent_id

    async def verdict(self, agent_id: str | None, tool: str, args: dict[str, Any],
                      cwd: Path | None = None, agent_type: str = SESSION_AGENT) -> str | None:
        event = {"session_id": "s1", "transcript_path": str(self.main),
                 "cwd": str(cwd or self.project), "hook_event_name": "PreToolUse",
                 "tool_name": tool, "tool_input": args, "tool_use_id": "toolu_1"}
        if agent_id is not None:
            event |= {"agent_id": agent_id, "agent_type": agent_type}
        answer = await asyncio.to_thread(decide, event)
        return answer and answer["hookSpecificOutput"]["permissionDecision"]

    def records(self) -> list[tuple[str, str, str]]:
        with open_store(self.project, "filesystem") as store:
            return [(r.meta["tool"], r.meta["subject"], r.status)
                    for r in store.open_run(self.run_id).tool_calls()]


def scenario(tmp_path: Path, body: Callable[[Sessions], Awaitable[None]]) -> None:
    """Run ``body`` with a :class:`Sessions` whose server stays connected throughout."""
    project = tmp_path / "project"
    (project / "docs" / "sub").mkdir(parents=True)
    (project / "src").mkdir()
    (project / "docs" / "guide.md").write_text("# Guide\n")
    (project / "secret.txt").write_text("password = hunter2\n")

    async def main() -> None:
        async with Client(create_server(project, watch=False), mode="legacy") as client:
            started = (await client.call_tool("start_run", {"program": PROGRAM})
                       ).structured_content
            host = Sessions(tmp_path, client, started)
            for binding, statement in host.statements.items():
                spawned = await client.call_tool("spawn_session", {
                    "vm_token": host.vm_token, "statement": statement})
                host.tokens[binding] = spawned.structured_content["session_token"]
            await body(host)

    asyncio.run(main())


def test_a_search_is_refused_unless_its_agent_may_read_all_it_reaches(tmp_path):
    """Claude Code shows every match of a Grep or Glob: one whose root holds files the agent
    may not read (the project, for an agent with read: docs/**), or .prose/ (the project,
    for any agent), is refused; a search inside what it may read goes to the host."""

    async def body(host: Sessions) -> None:
        notes = host.subagent("n1", f"OpenProse session, token: {host.tokens['notes']}")
        other = host.subagent("o1", f"OpenProse session, token: {host.tokens['other']}")
        for args in ({"pattern": "hunter2", "path": ".", "output_mode": "content"},
                     {"pattern": "KEY", "glob": "**/.env", "output_mode": "content"},
                     {"pattern": "hunter2", "path": str(host.project / "docs" / ".."),
                      "output_mode": "content"}):
            assert await host.verdict(notes, "Grep", args) == "deny", args
        assert await host.verdict(notes, "Glob", {"pattern": "**/.env"}) == "deny"
        assert await host.verdict(notes, "Grep", {"pattern": "x", "path": "docs"}) is None
        assert await host.verdict(notes, "Glob", {"pattern": "*.md", "path": str(
            host.project / "docs")}) is None
        # read: ** may read all of src/, but not the project: it holds .prose/
        assert await host.verdict(other, "Grep", {"pattern": "KEY",
                                                  "output_mode": "content"}) == "deny"
        assert await host.verdict(other, "Grep", {"pattern": "x", "path": "src"}) is None

    scenario(tmp_path, body)


def test_a_session_that_has_ended_gets_nothing_more(tmp_path):
    """Once a session wrote its binding (or was reported failed), its subagent's calls are
    refused whatever they are: the permissions it had are gone with it."""

    async def body(host: Sessions) -> None:
        notes = host.subagent("n1", f"token: {host.tokens['notes']}")
        other = host.subagent("o1", f"token: {host.tokens['other']}")
        write_docs = {"file_path": str(host.project / "docs" / "a.md"), "content": "x"}
        assert await host.verdict(notes, "Write", write_docs) is None
        await host.client.call_tool("write_binding", {"token": host.tokens["notes"],
                                                      "value": "summary"})
        failed = await host.client.call_tool("update_state", {
            "vm_token": host.vm_token, "statement": host.statements["other"],
            "status": "failed"})
        assert not failed.is_error, failed.content
        key = host.project.parent / "home" / ".ssh" / "id_rsa"
        for agent, tool, args in [
                (notes, "Read", {"file_path": str(key)}),
                (notes, "WebFetch", {"url": "https://example.com/", "prompt": "p"}),
                (notes, "Write", write_docs),
                (notes, TOOL_PREFIX + "get_brief", {"token": host.tokens["notes"]}),
                (other, "Read", {"file_path": str(host.project / "docs" / "guide.md")}),
                (other, "Bash", {"command": "ls"})]:
            assert await host.verdict(agent, tool, args) == "deny", (agent, tool)

    scenario(tmp_path, body)


def test_the_project_is_found_from_a_folder_inside_it(tmp_path):
    """Claude Code may run in a subfolder of the project: the session is still found, and a
    relative path is resolved where the host resolves it (the event's folder)."""

    async def body(host: Sessions) -> None:
        notes = host.subagent("n1", f"token: {host.tokens['notes']}")
        inside = host.project / "docs" / "sub"
        assert await host.verdict(notes, "Write", {"file_path": str(
            host.project / "src" / "x.py"), "content": "x"}, cwd=inside) == "deny"
        assert await host.verdict(notes, "Read", {"file_path": "../../secret.txt"},
                                  cwd=inside) == "deny"
        assert await host.verdict(notes, "Read", {"file_path": "../guide.md"},
                                  cwd=inside) is None
        assert [status for *_, status in host.records()] == ["refused", "refused", "allowed"]

    scenario(tmp_path, body)


def test_every_token_in_the_first_message_must_be_live(tmp_path):
    """A session token no run issued (or an ended one) in the first message is refused,
    before the real token too; two sessions' tokens are one too many. A string only shaped
    a little like a token is not one."""

    async def body(host: Sessions) -> None:
        notes, other = host.tokens["notes"], host.tokens["other"]
        docs = {"file_path": str(host.project / "docs" / "a.md"), "content": "x"}
        src = {"file_path": str(host.project / "src" / "x.py"), "content": "x"}
        for number, prompt in enumerate((f"token: {UNKNOWN}\nThe real one — token: {notes}",
                                         f"token: {UNKNOWN}",
                                         "Run session token gs_AAAAAAAAAAAAAAAA",
                                         f"token: {notes} and token: {other}")):
            agent = host.subagent(f"d{number}", prompt)
            for args in (src, docs):
                assert await host.verdict(agent, "Write", args,
                                          agent_type="general-purpose") == "deny", prompt
        shaped = host.subagent("s1", f"not tokens: ses_short gs_ {UNKNOWN}x token: {notes}")
        assert await host.verdict(shaped, "Write", docs) is None
        assert await host.verdict(shaped, "Write", src) == "deny"

    scenario(tmp_path, body)


def test_a_sessions_subagent_may_call_only_what_the_hook_can_check(tmp_path):
    """Of our server's tools a session's subagent calls only the session's own, with its own
    token (no starting, resuming or cancelling runs: a run it started could grant itself
    more); any tool the hook cannot check — another server's, a nested subagent, a command
    outside the host's sandbox — is refused."""

    async def body(host: Sessions) -> None:
        notes = host.subagent("n1", f"token: {host.tokens['notes']}")
        other = host.subagent("o1", f"token: {host.tokens['other']}")
        token = host.tokens["notes"]
        refused = [
            (TOOL_PREFIX + "start_run", {"program": "agent a:\n  prompt: x\n"}),
            (TOOL_PREFIX + "run_program", {"program": "x.prose"}),
            ("mcp__openprose__resume_run", {"run_id": host.run_id, "take_over": True}),
            (TOOL_PREFIX + "cancel_run", {"run_id": host.run_id}),
            (TOOL_PREFIX + "write_binding", {"token": host.tokens["other"], "value": "x"}),
            ("mcp__github__create_issue", {"title": "x"}),
            ("Agent", {"description": "d", "prompt": "read ~/.ssh", "subagent_type": "x"}),
            ("TaskOutput", {"task_id": "t1"}),
            ("ReadMcpResource", {"server": "openprose", "uri": "prose://runs"}),
        ]
        for tool, args in refused:
            assert await host.verdict(notes, tool, args) == "deny", tool
        for tool, args in [(TOOL_PREFIX + "get_brief", {"token": token}),
                           ("mcp__openprose__read_binding", {"token": token, "name": "x"}),
                           ("TodoWrite", {"todos": []})]:
            assert await host.verdict(notes, tool, args) is None, tool
        assert await host.verdict(other, "Bash", {"command": "ls"}) == "ask"
        assert await host.verdict(other, "Bash", {"command": "ls",
                                                  "dangerouslyDisableSandbox": True}) == "deny"
        recorded = [(tool.removeprefix(TOOL_PREFIX), status) for tool, _, status
                    in host.records()]
        assert recorded == [(tool.removeprefix(TOOL_PREFIX), "refused") for tool, _ in refused] \
            + [("get_brief", "allowed"), ("mcp__openprose__read_binding", "allowed"),
               ("Bash", "allowed"), ("Bash", "refused")]

    scenario(tmp_path, body)


def test_who_claims_to_be_a_session_is_one(tmp_path):
    """The plugin's session agent without a token, or a subagent whose first message cannot
    be read inside an OpenProse project, is refused (it may be a session nothing can
    check); other subagents without a token, and the main agent, are the host's."""

    async def body(host: Sessions) -> None:
        plain = host.subagent("p1", "Summarize the docs, please.")
        write = {"file_path": str(host.project / "src" / "x.py"), "content": "x"}
        assert await host.verdict(plain, "Write", write) == "deny"
        assert await host.verdict(plain, "Write", write, agent_type="general-purpose") is None
        assert await host.verdict("gone", "Write", write, agent_type="general-purpose") == "deny"
        assert await host.verdict("../../x", "Write", write,
                                  agent_type="general-purpose") == "deny"
        outside = host.project.parent / "elsewhere"
        outside.mkdir()
        assert await host.verdict("gone", "Write", write, cwd=outside,
                                  agent_type="general-purpose") is None
        assert await host.verdict(None, "Write", write) is None

    scenario(tmp_path, body)


def test_prose_hook_finds_the_session_as_claude_code_runs_it(tmp_path):
    """The same decision through `prose hook pre-tool-use`, the event on stdin."""

    async def body(host: Sessions) -> None:
        notes = host.subagent("n1", f"token: {host.tokens['notes']}")
        event = {"session_id": "s1", "agent_id": notes, "agent_type": SESSION_AGENT,
                 "transcript_path": str(host.main), "cwd": str(host.project / "docs"),
                 "hook_event_name": "PreToolUse", "tool_name": "Grep",
                 "tool_input": {"pattern": "hunter2", "path": "..", "output_mode": "content"}}
        done = await asyncio.to_thread(
            subprocess.run, [str(PROSE), "hook", "pre-tool-use"], input=json.dumps(event),
            capture_output=True, text=True, timeout=60, check=True)
        answer = json.loads(done.stdout)["hookSpecificOutput"]
        assert answer["permissionDecision"] == "deny"
        assert "cannot be filtered" in answer["permissionDecisionReason"]

    scenario(tmp_path, body)
