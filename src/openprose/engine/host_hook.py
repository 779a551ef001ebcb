"""Permissions in a host that runs sessions itself: Claude Code's ``PreToolUse`` hook.

In Claude Code a session of a guided or embodied run is a subagent using the host's own work
tools (Read, Write, Edit, Bash, WebFetch …). The plugin's hook hands every tool call to
:func:`decide`: a call made inside a subagent names it (``agent_id``); the subagent's
transcript sits beside the main one, and its first message is what the main agent gave it —
the session's brief or handle, which holds the session token. The token leads to the
session's grant, which recorded its agent and permissions when the session started; the
call is decided by :mod:`openprose.engine.permissions` like an engine session's, and
recorded in the run's journal.

It fails closed for anything that is, or claims to be, a session: a subagent whose first
message holds a session token (or whose type is the plugin's session agent) gets only what
its live session allows — every token in that message must be live and name the same
session, a session that has ended gets nothing, a tool this module cannot check is refused,
and of our own server's tools only a session's, with its own token. Calls outside OpenProse
sessions are left to the host.

A refusal becomes the subagent's error result; ``bash: prompt`` and ``network: prompt``
leave the call to the host's own permission prompt (``ask``); an allowed call is left to the
host's settings too (the hook never widens them). Commands are not confined by our sandbox
here: the host's own sandbox settings are what confine an allowed command.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openprose.engine.permissions import (
    STATE_DIR,
    Decision,
    Gate,
    Policy,
    from_grant,
    host_of,
)

#: A session token as OpenProse makes them: the state's (``ses_`` and 24 random bytes,
#: embodied runs) or a guided run's item token (``gs_`` and 12), URL-safe base64.
TOKEN = re.compile(r"(?<![\w-])(?:ses_[\w-]{32}|gs_[\w-]{16})(?![\w-])", re.ASCII)
#: The plugin's agent type for sessions (skill/agents/session.md): a session whatever its
#: prompt holds.
SESSION_AGENT = "openprose:session"
#: A subagent's id as Claude Code makes it (it names the subagent's transcript file).
AGENT_ID = re.compile(r"[\w-]{1,128}", re.ASCII)
#: Our server's tools as Claude Code names them: the plugin's server, or one added as
#: ``openprose`` (``claude mcp add openprose …``).
OUR_TOOL = re.compile(r"mcp__(?:plugin_openprose_openprose|openprose)__(\w+)")
#: Of our server's tools, those a session uses, each with its own session token.
SESSION_TOOLS = ("get_brief", "read_binding", "write_binding", "read_memory", "write_memory",
                 "fail_session")
#: Claude Code's file tools: (argument naming the path, writes?).
PATH_TOOLS = {"Read": ("file_path", False), "Write": ("file_path", True),
              "Edit": ("file_path", True), "MultiEdit": ("file_path", True),
              "NotebookEdit": ("notebook_path", True),
              "NotebookRead": ("notebook_path", False)}
#: Its searches, with the argument that is a path glob resolved against the search's
#: ``path``: Glob's ``pattern`` and Grep's ``glob`` (Grep's ``pattern`` is a regex over
#: contents, no path).
SEARCH_TOOLS = {"Glob": "pattern", "Grep": "glob", "LS": ""}
WEB_TOOLS = ("WebFetch", "WebSearch")
#: Claude Code's tool that starts a subagent (its ``model`` picks the subagent's model).
LAUNCH = "Agent"
#: Tools that reach nothing outside the conversation (a to-do list, loading tool schemas).
INERT_TOOLS = ("TodoWrite", "ToolSearch")
#: Characters that end a glob's fixed prefix.
_WILDCARD = re.compile(r"[*?\[{]")
#: Past a wildcard: a ``..`` segment or brace alternative, or a brace group holding a ``/``.
_LEAVES = re.compile(r"(?:^|[/{,])\.\.(?:$|[/},])|\{[^}]*/")
#: Why a search must have a wholly readable root, said in each such refusal.
_UNFILTERED = ("Claude Code's search results cannot be filtered, so a session searches only "
               "a folder its agent may read all of")


@dataclass(frozen=True)
class HostCall:
    """One tool call of a live session's subagent."""

    tool: str
    args: dict[str, Any]
    cwd: Path
    token: str

    def place(self, raw: Any) -> str:
        """A path argument as the host reads it: relative to the call's folder."""
        if not isinstance(raw, str) or not raw or raw.startswith("~"):
            return raw if isinstance(raw, str) else ""
        return raw if os.path.isabs(raw) else str(self.cwd / raw)


#: Decides one kind of call: (decision, verdict "deny"/"ask", or ``None``: the host decides).
Check = Callable[[Gate, HostCall], tuple[Decision, str | None]]


def local_backends(project: Path) -> Sequence[str]:
    """The backends kept under the project itself."""
    return ("filesystem", "sqlite")


def decide(payload: dict[str, Any],
           backends: Callable[[Path], Sequence[str]] = local_backends
           ) -> dict[str, Any] | None:
    """The hook's answer to one ``PreToolUse`` event: a decision to print, or ``None`` to
    leave the call to the host. ``backends``: where a project's runs may be kept."""
    started = time.monotonic()
    if not payload.get("agent_id"):
        if payload.get("tool_name") == LAUNCH:
            return launch(payload, backends)
        return None  # the main agent's other calls are the host's and its user's to decide
    cwd = Path(os.path.realpath(str(payload.get("cwd") or os.getcwd())))
    tokens = session_tokens(payload)
    if tokens is None:
        if payload.get("agent_type") == SESSION_AGENT or _projects(cwd):
            return answer("deny", "refused: OpenProse cannot read this subagent's first "
                                  "message in its transcript, so it cannot tell whether it "
                                  "is a session of a run in this project")
        return None
    if not tokens:
        if payload.get("agent_type") == SESSION_AGENT:
            return answer("deny", f"refused: a {SESSION_AGENT} subagent whose prompt holds "
                                  "no session token is no session (hand it the session's "
                                  "handle or brief)")
        return None
    found = _live(cwd, tokens, backends)
    if isinstance(found, str):
        return answer("deny", found)
    project, store, run_id, grant = found
    try:
        work = grant.get("work") or {}
        gate = Policy(project).gate(work.get("agent"), from_grant(work))
        args = payload.get("tool_input")
        call = HostCall(str(payload.get("tool_name") or ""),
                        args if isinstance(args, dict) else {}, cwd, tokens[0])
        decision, verdict = check(gate, call)
        if call.tool not in INERT_TOOLS:
            entry = _entry(str(work.get("key") or grant.get("name")), call.tool, decision,
                           gate, started)
            if work.get("line"):
                entry.meta["line"] = work["line"]
            store.backend.append_journal(run_id, entry, durable=True)
    finally:
        store.close()
    if verdict is None:
        return None
    return answer(verdict, decision.message or f"{decision.rule}: the host asks")


def check(gate: Gate, call: HostCall) -> tuple[Decision, str | None]:
    """A live session's call, decided by what it reaches."""
    ours = OUR_TOOL.fullmatch(call.tool)
    if ours is not None:
        return _server(gate, call, ours.group(1))
    return CHECKS.get(call.tool, _unknown)(gate, call)


def launch(payload: dict[str, Any],
           backends: Callable[[Path], Sequence[str]] = local_backends) -> dict[str, Any] | None:
    """The main agent starting a subagent (``Agent``) whose prompt holds an OpenProse
    session token: refused when its ``model`` is not the one the session's program names
    (or is missing), naming the model to use; otherwise recorded in the run's journal with
    the model the session runs on."""
    from openprose.engine.briefs import host_model
    from openprose.engine.work_tools import ToolRecord  # heavy: only for a session's launch

    args = payload.get("tool_input")
    found = TOKEN.search(str(args.get("prompt") or "")) if isinstance(args, dict) else None
    if found is None:
        return None
    cwd = Path(os.path.realpath(str(payload.get("cwd") or os.getcwd())))
    held = _grant(_projects(cwd) or [cwd], found.group(0), backends)
    if held is None:
        return None
    _, store, run_id, grant = held
    work = grant.get("work") or {}
    wanted, given = host_model(work.get("model")), args.get("model")
    agent = str(work.get("agent") or "(no agent)")
    refused = wanted is not None and given != wanted
    reason = (f"refused: this OpenProse session's agent '{agent}' runs on model {wanted}: "
              f"start it with the Agent tool's model: \"{wanted}\""
              + (f" (not {given!r})" if given else "")) if refused else ""
    record = ToolRecord(LAUNCH, str(given or "(the host's default model)"), not refused,
                        f"model: {wanted}" if wanted else "no model named", agent)
    try:
        store.backend.append_journal(run_id, _launched(work, grant, record), durable=True)
    finally:
        store.close()
    return answer("deny", reason) if refused else None


def answer(verdict: str, reason: str) -> dict[str, Any]:
    """Claude Code's hook JSON for ``verdict`` (``deny`` or ``ask``), its reason shown to the
    model."""
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                   "permissionDecision": verdict,
                                   "permissionDecisionReason": reason}}


def failed(payload: dict[str, Any], error: BaseException) -> dict[str, Any] | None:
    """The answer when deciding itself failed: a subagent's call (possibly an OpenProse
    session's) is refused, since nothing checked it; the main agent's is left to the host."""
    if not payload.get("agent_id"):
        return None
    return answer("deny", "refused: OpenProse could not check this call against the "
                          f"session's permissions ({type(error).__name__}: {str(error)[:300]}); run "
                          "`prose doctor` in the project")


def session_tokens(payload: dict[str, Any]) -> list[str] | None:
    """Every session token in the first message of the calling subagent's transcript, in
    order and once each; ``None`` when that message cannot be read."""
    transcript, agent = payload.get("transcript_path"), str(payload.get("agent_id"))
    if not isinstance(transcript, str) or not transcript or not AGENT_ID.fullmatch(agent):
        return None
    own = Path(transcript).with_suffix("") / "subagents" / f"agent-{agent}.jsonl"
    try:
        with open(own, encoding="utf-8") as handle:
            first = json.loads(handle.readline())
    except (OSError, ValueError):
        return None
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict) or "content" not in message:
        return None
    return list(dict.fromkeys(TOKEN.findall(_text(message["content"]))))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(part.get("text") if isinstance(part, dict) else part)
                         for part in content)
    return ""


def _projects(cwd: Path) -> list[Path]:
    """The OpenProse projects holding ``cwd`` (a folder with ``.prose/``), nearest first."""
    return [folder for folder in (cwd, *cwd.parents) if (folder / STATE_DIR).is_dir()]


def _live(cwd: Path, tokens: list[str], backends: Callable[[Path], Sequence[str]]
          ) -> tuple[Path, Any, str, dict[str, Any]] | str:
    """The one live session the tokens name: (project, its open store, run, grant), or the
    refusal when a token is not live or they name more than one session."""
    projects = _projects(cwd) or [cwd]
    grants = [_grant(projects, token, backends) for token in tokens]
    dead = next(((token, grant) for token, grant in zip(tokens, grants, strict=True)
                 if grant is None or not grant[3].get("alive")), None)
    chosen = grants[0] if dead is None and len(grants) == 1 else None
    for grant in grants:
        if grant is not None and grant is not chosen:
            grant[1].close()
    if chosen is not None:
        return chosen
    if dead is None:
        return ("refused: this subagent's prompt names more than one OpenProse session; a "
                "subagent does one session")
    token, grant = dead
    state = "has ended" if grant is not None else "is no live session of a run here"
    return (f"refused: this subagent's prompt names the OpenProse session {token[:7]}…, which "
            f"{state}; a session's subagent gets nothing once its session has ended")


def _grant(projects: list[Path], token: str, backends: Callable[[Path], Sequence[str]]
           ) -> tuple[Path, Any, str, dict[str, Any]] | None:
    """Where ``token``'s grant is kept, live or ended (its store left open), or ``None``."""
    from openprose import state

    for project in projects:
        for backend in backends(project):
            if backend == "sqlite" and not any((project / STATE_DIR / "runs").glob("*/state.db")):
                continue
            try:
                store = state.open_store(project, backend)
            except state.StateError:
                continue
            found = store.host_grant(token) if token.startswith("gs_") else \
                store.token_grant(token)
            if found is not None:
                return project, store, found[0], found[1]
            store.close()
    return None


# ---------------------------------------------------------------------- each kind of call


def _file(gate: Gate, call: HostCall) -> tuple[Decision, str | None]:
    key, write = PATH_TOOLS[call.tool]
    decision, _ = gate.path(call.place(call.args.get(key)), write=write)
    return decision, None if decision.allowed else "deny"


def _search(gate: Gate, call: HostCall) -> tuple[Decision, str | None]:
    """A search reaches everything under its root, and Claude Code shows every match: the
    root (its ``path``, or the folder the host runs in) and where its glob starts must each
    be a place the agent may read all of, holding no ``.prose/``."""
    root = call.place(call.args.get("path") or str(call.cwd))
    decision = _whole(gate, root, root)
    pattern = call.args.get(SEARCH_TOOLS[call.tool]) if SEARCH_TOOLS[call.tool] else None
    if decision.allowed and isinstance(pattern, str) and pattern:
        decision = _glob(gate, root, pattern)
    return decision, None if decision.allowed else "deny"


def _glob(gate: Gate, root: str, pattern: str) -> Decision:
    """Where ``pattern`` starts (its fixed prefix: absolute, ``~/…`` or relative to
    ``root``) must be wholly readable too, so ``../../etc/*`` or ``~/.ssh/*`` reaches no
    further than a path would; a negation, or a ``..`` or braced path past the first
    wildcard, cannot be checked that way and is refused."""
    parts = pattern.split("/")
    cut = next((i for i, part in enumerate(parts) if _WILDCARD.search(part)), len(parts))
    fixed, rest = "/".join(parts[:cut]), "/".join(parts[cut:])
    if pattern.startswith("!") or _LEAVES.search(rest):
        rule = "a glob may not negate or leave its search root after a wildcard"
        return Decision(False, rule, pattern, f"refused: agent '{gate.agent}' may not search "
                                              f"{pattern!r} ({rule})")
    if pattern.startswith(("/", "~")):
        base = os.path.expanduser(fixed or "/")
    else:
        base = os.path.join(os.path.expanduser(root), fixed) if fixed else root
    return _whole(gate, base, pattern)


def _whole(gate: Gate, place: str, subject: str) -> Decision:
    """May the agent read all of ``place`` (so a search there shows only what it may read)?"""
    decision, real = gate.path(place, write=False)
    if decision.allowed and real is not None and (gate.project / STATE_DIR).is_relative_to(real):
        rule = f"{STATE_DIR}/ is never readable by a session"
        decision = Decision(False, rule, place, f"refused: agent '{gate.agent}' may not "
                                                f"search {place} (it holds {STATE_DIR}/)")
    if decision.allowed:
        return Decision(True, decision.rule, subject)
    shown = f" (the glob {subject!r} searches there)" if subject != place else ""
    return Decision(False, decision.rule, subject, f"{decision.message}{shown}; {_UNFILTERED}")


def _bash(gate: Gate, call: HostCall) -> tuple[Decision, str | None]:
    command = str(call.args.get("command") or "")
    if call.args.get("dangerouslyDisableSandbox"):
        rule = "a session's command stays in the host's sandbox"
        return Decision(False, rule, command, f"refused: agent '{gate.agent}' may not run "
                                              f"{command!r} outside the sandbox ({rule})"), "deny"
    if gate.permissions.bash == "prompt" and not gate.vouches(command):
        return Decision(True, "bash: prompt, left to the host's prompt", command), "ask"
    decision = _sync(gate.command(command))
    return decision, None if decision.allowed else "deny"


def _web(gate: Gate, call: HostCall) -> tuple[Decision, str | None]:
    subject = str(call.args.get("url") or call.args.get("query") or "")
    mode = gate.permissions.network
    if mode == "prompt":
        return Decision(True, "network: prompt, left to the host's prompt", subject), "ask"
    decision = _sync(gate.network(ask=False))
    hosts, host = gate.domains(), host_of(subject)
    if decision.allowed and hosts is not None and (call.tool != "WebFetch" or not any(
            host == h or host.endswith("." + h) for h in hosts)):
        decision = Decision(False, f"network: {list(gate.permissions.network or ())}", subject,
                            f"refused: agent '{gate.agent}' may not reach {subject!r} "
                            f"(network: {list(gate.permissions.network or ())})")
    return decision, None if decision.allowed else "deny"


def _inert(gate: Gate, call: HostCall) -> tuple[Decision, str | None]:
    return Decision(True, "reaches nothing outside the conversation", call.tool), None


def _server(gate: Gate, call: HostCall, name: str) -> tuple[Decision, str | None]:
    """Our own server's tools: a session's own, with its own token; never the VM's (no
    starting, stepping, resuming or cancelling runs from inside one)."""
    if name not in SESSION_TOOLS:
        rule = f"a session uses only the session tools ({', '.join(SESSION_TOOLS)})"
        return Decision(False, rule, name, f"refused: agent '{gate.agent}' may not call "
                                           f"{name} ({rule})"), "deny"
    if call.args.get("token") != call.token:
        rule = "a session uses only its own session token"
        return Decision(False, rule, name, f"refused: agent '{gate.agent}' may not call "
                                           f"{name} with another token ({rule})"), "deny"
    return Decision(True, "a session's own tool", name), None


def _unknown(gate: Gate, call: HostCall) -> tuple[Decision, str | None]:
    rule = "a tool OpenProse cannot check is refused to a session"
    return Decision(False, rule, call.tool, f"refused: agent '{gate.agent}' may not use "
                                            f"{call.tool[:100]} ({rule})"), "deny"


#: The check for each tool Claude Code offers; any other is refused to a session.
CHECKS: dict[str, Check] = {
    **dict.fromkeys(PATH_TOOLS, _file), **dict.fromkeys(SEARCH_TOOLS, _search),
    "Bash": _bash, **dict.fromkeys(WEB_TOOLS, _web), **dict.fromkeys(INERT_TOOLS, _inert)}


def _sync(awaitable: Any) -> Decision:
    import asyncio

    return asyncio.run(awaitable)


def _launched(work: dict[str, Any], grant: dict[str, Any], record: Any) -> Any:
    from openprose.state.models import JournalEntry

    meta = {**record.to_meta(), "host": "claude-code", "at": time.time()}
    if record.allowed:
        meta["model"] = record.subject  # the model the session really runs on
    if work.get("line"):
        meta["line"] = work["line"]
    return JournalEntry(str(work.get("key") or grant.get("name")), "tool",
                        status="allowed" if record.allowed else "refused", meta=meta)


def _entry(key: str, tool: str, decision: Decision, gate: Gate, started: float) -> Any:
    from openprose.engine.work_tools import ToolRecord  # heavy: only for a session's call
    from openprose.state.models import JournalEntry

    record = ToolRecord(tool, decision.subject, decision.allowed, decision.rule, gate.agent,
                        duration_s=round(time.monotonic() - started, 3))
    return JournalEntry(key, "tool", status="allowed" if decision.allowed else "refused",
                        meta={**record.to_meta(), "host": "claude-code", "at": time.time()})
