"""The work tools a session gets — read, write, edit, glob, grep, bash — under its
permissions, each call checked first and recorded.

The tools are defined as the ``anthropic`` package's agent toolset defines them (the model
knows those), but run by us: the file tools by :mod:`openprose.engine.file_tools`, which
follows no link between a path's check and its use, and ``bash`` as a fresh process inside
the OS sandbox (:mod:`openprose.engine.sandbox`), since the toolset's shell is a
persistent, unconfined one. Every call — allowed or refused — becomes one :class:`ToolRecord` for the
run's journal; results are capped before they reach the model.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openprose.engine import file_tools as files
from openprose.engine import sandbox as sandboxes
from openprose.engine.permissions import Consent, Decision, Gate, Grants, Policy
from openprose.state.config import COMMAND_TIMEOUT

if TYPE_CHECKING:  # skills fetch with httpx: not loaded for the permission hook's records
    from openprose.engine.skills import Skill

FILE_TOOLS = ("read", "write", "edit", "glob", "grep")
TOOLS = (*FILE_TOOLS, "bash")
#: Characters of one tool result the model gets at most.
RESULT_CAP = 30_000
_BASH_KEYS = {"command", "timeout_ms", "restart"}
#: Anthropic's server tools for the web, offered when the session may use the network.
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 8}
WEB_FETCH = {"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 8}


@dataclass(frozen=True, slots=True)
class ToolRecord:
    """One call, for the journal: what was asked, what was decided, how it ended."""

    tool: str
    subject: str
    allowed: bool
    rule: str
    agent: str
    exit_code: int | None = None
    bytes: int = 0
    duration_s: float = 0.0

    def to_meta(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}


@dataclass
class WorkSetup:
    """Run-wide: the permission policy, the sandbox and the limits every session shares."""

    policy: Policy
    #: ``None``: this machine's, detected when a command first runs.
    sandbox: sandboxes.Sandbox | None = None
    command_timeout: float = sandboxes.DEFAULT_TIMEOUT
    result_cap: int = RESULT_CAP
    env: Mapping[str, str] | None = None
    #: The program's skills, resolved (name → skill).
    skills: dict[str, Skill] = field(default_factory=dict)

    def tools(self, gate: Gate, record: Callable[[ToolRecord], None]) -> WorkTools:
        return WorkTools(self, gate, record)


def default_setup(project: Path, env: Mapping[str, str] | None = None, *,
                  consent: Consent | None = None, bash: bool = False, network: bool = False,
                  unsandboxed: bool = False) -> WorkSetup:
    """The work setup of a run in ``project``: the user's grants from flags (``bash``,
    ``network``, ``unsandboxed``) and settings (``env``: default the project's settings)."""
    from openprose.state import settings

    env = settings(project) if env is None else env
    grants = Grants.from_settings(env, bash=bash, network=network, unsandboxed=unsandboxed)
    timeout = _seconds(env.get(COMMAND_TIMEOUT), sandboxes.DEFAULT_TIMEOUT)
    return WorkSetup(Policy(project, grants, consent), command_timeout=timeout)


def _seconds(value: str | None, default: float) -> float:
    try:
        seconds = float(value) if value else default
    except ValueError:
        return default
    return seconds if seconds > 0 else default


class WorkTools:
    """One session's work tools."""

    def __init__(self, setup: WorkSetup, gate: Gate, record: Callable[[ToolRecord], None]
                 ) -> None:
        self.setup = setup
        self.gate = gate
        self.record = record

    @functools.cached_property
    def _toolset(self) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
        """The file tools' definitions by name and the shell's, built on first use: building
        them costs milliseconds (pydantic schemas per tool), and most sessions (a host's, a
        scripted one without tool calls) never use them. Its SDK module is imported here too:
        importing it takes seconds on a loaded machine, which every ``prose`` command and
        server start paid."""
        from anthropic.lib.tools.agent_toolset import (
            AgentToolContext,
            beta_agent_toolset_20260401,
        )

        context = AgentToolContext(workdir=str(self.gate.project), env={})
        defined = {tool.name: tool.to_dict() for tool in beta_agent_toolset_20260401(context)}
        return {name: defined[name] for name in FILE_TOOLS}, defined["bash"]

    @property
    def file_tools(self) -> dict[str, dict[str, Any]]:
        return self._toolset[0]

    @property
    def bash_definition(self) -> dict[str, Any]:
        return self._toolset[1]

    @property
    def agent(self) -> str:
        return self.gate.agent

    def skills(self) -> list[Skill]:
        """The session's skills, as offered to it (name, description, folder)."""
        return [self.setup.skills[name] for name in self.gate.skills
                if name in self.setup.skills]

    def definitions(self) -> list[dict[str, Any]]:
        """Tool definitions for the Messages API: the ones this session can use at all."""
        perms = self.gate.permissions
        names = [name for name in FILE_TOOLS
                 if name not in ("write", "edit") or perms.write]
        defs = [self.file_tools[name] for name in names]
        if perms.bash != "deny" or perms.execute:
            defs.append({**self.bash_definition,
                         "description": "Run a shell command in the project directory (each "
                                        "call is a fresh, sandboxed shell)."})
        return defs

    async def server_tools(self) -> list[dict[str, Any]]:
        """Web search and fetch (run by Anthropic) when this session may use the network;
        a ``network: [...]`` list limits them to its hosts. The decision is recorded (as
        tool ``web``): the server tools' own calls happen at Anthropic, out of our sight."""
        started = time.monotonic()
        decision = await self.gate.network()
        self._done("web", "search and fetch", decision, started, "")
        if not decision.allowed:
            return []
        domains = self.gate.domains()
        limit = {"allowed_domains": list(domains)} if domains else {}
        return [{**WEB_SEARCH, **limit}, {**WEB_FETCH, **limit}]

    async def call(self, name: str, args: Any) -> tuple[str, bool]:
        """Run one call: (result text, is_error). Never raises for the model's mistakes."""
        started = time.monotonic()
        if not isinstance(args, dict):
            return self._done(name, "", Decision(False, "bad arguments", ""), started,
                              f"{name}: arguments must be an object"), True
        if name == "bash":
            return await self._bash(args, started)
        if name not in self.file_tools:
            return f"unknown tool {name}", True
        return await self._file(name, args, started)

    # ------------------------------------------------------------------ file tools

    async def _file(self, name: str, args: dict[str, Any], started: float
                    ) -> tuple[str, bool]:
        write = name in ("write", "edit")
        key = "file_path" if name in ("read", "write", "edit") else "path"
        given = args.get(key)
        subject = str(given) if given is not None else "."
        schema = self.file_tools[name]["input_schema"]
        unknown = set(args) - set(schema.get("properties", {}))
        missing = [k for k in schema.get("required", ()) if k not in args]
        if unknown or missing or (given is not None and not isinstance(given, str)):
            what = (f"unknown argument(s) {sorted(unknown)}" if unknown else
                    f"missing argument(s) {missing}" if missing else f"{key} must be a string")
            decision = Decision(False, "bad arguments", subject)
            return self._done(name, subject, decision, started, f"{name}: {what}"), True
        decision, resolved = self.gate.path(subject, write=write,
                                            listing=name in ("glob", "grep"))
        if not decision.allowed or resolved is None:
            return self._done(name, subject, decision, started, decision.message), True
        try:
            text, failed = await asyncio.to_thread(self._file_work, name, args, resolved,
                                                   subject), False
        except files.LinkMet:
            decision = Decision(False, "a link appeared on the path after its check",
                                subject)
            text = (f"refused: agent '{self.agent}' may not {name} {subject} (it changed "
                    "since it was checked: links are not followed)")
            return self._done(name, subject, decision, started, text), True
        except files.FileToolError as err:  # the tool's own failure goes back to the model
            text, failed = str(err), True
        text = text.replace(str(self.gate.project) + "/", "")
        return self._done(name, subject, decision, started, text, 1 if failed else 0), failed

    def _file_work(self, name: str, args: dict[str, Any], real: Path, shown: str) -> str:
        if name == "read":
            return files.read(real, shown, args.get("view_range"))
        if name == "write":
            return files.write(real, shown, args.get("content"))
        if name == "edit":
            return files.edit(real, shown, args.get("old_string"), args.get("new_string"),
                              args.get("replace_all"))
        if name == "glob":
            return files.glob(self.gate, real, args.get("pattern"))
        return files.grep(self.gate, real, args.get("pattern"))

    # ------------------------------------------------------------------ bash

    async def _bash(self, args: dict[str, Any], started: float) -> tuple[str, bool]:
        unknown = set(args) - _BASH_KEYS
        command = args.get("command")
        if unknown or (command is not None and not isinstance(command, str)):
            what = f"unknown argument(s) {sorted(unknown)}" if unknown else "command must be text"
            return self._done("bash", str(command or ""), Decision(False, "bad arguments", ""),
                              started, f"bash: {what}"), True
        if args.get("restart"):
            return "every call is a fresh shell: nothing to restart", False
        if not command:
            return "bash: command is required", True
        decision = await self.gate.command(command)
        if not decision.allowed:
            return self._done("bash", command, decision, started, decision.message), True
        box = self.setup.sandbox = self.setup.sandbox or sandboxes.detect()
        if not box.confined and not self.gate.policy.grants.unsandboxed:
            why = box.reason.removeprefix("none: ") if box.reason else (
                "no OS sandbox here; install bubblewrap, or allow unconfined commands with "
                "--allow-unsandboxed-bash")
            refused = Decision(False, "no OS sandbox", command,
                               f"refused: agent '{self.agent}' may not run {command!r} ({why}; "
                               "the setting is OPENPROSE_ALLOW_UNSANDBOXED_BASH=1)")
            return self._done("bash", command, refused, started, refused.message), True
        network = (await self.gate.network(ask=False)).allowed and self.gate.domains() is None
        timeout = self.setup.command_timeout
        asked = args.get("timeout_ms")
        if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0:
            timeout = min(timeout, asked / 1000)
        try:
            result = await sandboxes.run(
                box, command, project=self.gate.project, write_roots=self.gate.write_roots(),
                network=network, timeout=timeout, cap=self.setup.result_cap,
                env=self.setup.env, read_only=self.gate.kept_read_only())
        except sandboxes.SandboxError as err:
            return self._done("bash", command, decision, started, f"bash: {err}"), True
        failed = result.exit_code != 0
        text = result.output if not failed else \
            f"{result.output}\n[exit status {result.exit_code}]".lstrip("\n")
        return self._done("bash", command, decision, started, text, result.exit_code,
                          result.size), failed

    # ------------------------------------------------------------------ records

    def _done(self, tool: str, subject: str, decision: Decision, started: float, text: str,
              exit_code: int | None = None, size: int | None = None) -> str:
        text = cap(text, self.setup.result_cap)
        self.record(ToolRecord(tool, subject, decision.allowed, decision.rule, self.agent,
                               exit_code, len(text.encode()) if size is None else size,
                               round(time.monotonic() - started, 3)))
        return text


def cap(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters not shown]"


