"""Permissions in a host that runs sessions itself: Claude Code's ``PreToolUse`` hook.

In Claude Code a session of a guided or embodied run is a subagent using the host's own work
tools (Read, Write, Edit, Bash, WebFetch …). The plugin's hook hands every tool call to
:func:`decide`: a call made inside a subagent names it (``agent_id``); the subagent's
transcript sits beside the main one, and its first message is what the main agent gave it —
the session's brief or handle, which holds the session token. The token leads to the
session's grant, which recorded its agent and permissions when the session started; the
call is decided by :mod:`openprose.engine.permissions` like an engine session's, and
recorded in the run's journal. Calls outside OpenProse sessions are left to the host.

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
from pathlib import Path
from typing import Any

from openprose.engine.briefs import host_model
from openprose.engine.permissions import Decision, Gate, Policy, from_grant, host_of
from openprose.engine.work_tools import ToolRecord

#: A session token as a subagent's first message carries it: the state's (embodied runs)
#: or the guided run's item token.
TOKEN = re.compile(r"\b(?:ses|gs)_[A-Za-z0-9_-]{12,}")
#: Claude Code's tool that starts a subagent (its ``model`` picks the subagent's model).
LAUNCH = "Agent"
#: Claude Code's tools, by what they do: (argument naming the path, writes?, searches?).
PATH_TOOLS = {"Read": ("file_path", False, False), "Write": ("file_path", True, False),
              "Edit": ("file_path", True, False), "MultiEdit": ("file_path", True, False),
              "NotebookEdit": ("notebook_path", True, False),
              "NotebookRead": ("notebook_path", False, False),
              "Glob": ("path", False, True), "Grep": ("path", False, True),
              "LS": ("path", False, True)}
WEB_TOOLS = ("WebFetch", "WebSearch")
#: The argument of a search tool that is a path glob, resolved against its ``path``: Glob's
#: ``pattern`` and Grep's ``glob`` (Grep's ``pattern`` is a regex over contents, no path).
SEARCH_GLOBS = {"Glob": "pattern", "Grep": "glob"}
#: Characters that end a glob's fixed prefix.
_WILDCARD = re.compile(r"[*?\[{]")
#: Past a wildcard: a ``..`` segment or brace alternative, or a brace group holding a ``/``.
_LEAVES = re.compile(r"(?:^|[/{,])\.\.(?:$|[/},])|\{[^}]*/")


def decide(payload: dict[str, Any], backends: tuple[str, ...] = ("filesystem", "sqlite")
           ) -> dict[str, Any] | None:
    """The hook's answer to one ``PreToolUse`` event: a decision to print, or ``None`` to
    leave the call to the host."""
    started = time.monotonic()
    tool, args = payload.get("tool_name"), payload.get("tool_input")
    if tool == LAUNCH and not payload.get("agent_id"):
        return launch(payload, backends)
    if not payload.get("agent_id") or not isinstance(args, dict):
        return None
    if tool not in PATH_TOOLS and tool != "Bash" and tool not in WEB_TOOLS:
        return None
    token = session_token(payload)
    if token is None:
        return None
    project = Path(str(payload.get("cwd") or "."))
    found = _grant(project, token, backends)
    if found is None:
        return None
    store, run_id, grant = found
    try:
        work = grant.get("work") or {}
        gate = Policy(project).gate(work.get("agent"), from_grant(work))
        decision, subject, verdict = _check(gate, str(tool), args)
        entry = _entry(str(work.get("key") or grant.get("name")), str(tool), subject,
                       decision, gate, started)
        if work.get("line"):
            entry.meta["line"] = work["line"]
        store.backend.append_journal(run_id, entry, durable=True)
    finally:
        store.close()
    if verdict is None:
        return None
    return answer(verdict, decision.message or f"{decision.rule}: the host asks")


def launch(payload: dict[str, Any], backends: tuple[str, ...] = ("filesystem", "sqlite")
           ) -> dict[str, Any] | None:
    """The main agent starting a subagent (``Agent``) whose prompt holds an OpenProse
    session token: refused when its ``model`` is not the one the session's program names
    (or is missing), naming the model to use; otherwise recorded in the run's journal with
    the model the session runs on."""
    args = payload.get("tool_input")
    if not isinstance(args, dict):
        return None
    found = TOKEN.search(str(args.get("prompt") or ""))
    if found is None:
        return None
    held = _grant(Path(str(payload.get("cwd") or ".")), found.group(0), backends)
    if held is None:
        return None
    store, run_id, grant = held
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


def session_token(payload: dict[str, Any]) -> str | None:
    """The session token in the first message of the calling subagent's transcript."""
    transcript = payload.get("transcript_path")
    if not transcript:
        return None
    own = Path(str(transcript)).with_suffix("") / "subagents" / \
        f"agent-{payload['agent_id']}.jsonl"
    try:
        with open(own, encoding="utf-8") as handle:
            first = json.loads(handle.readline())
    except (OSError, ValueError):
        return None
    found = TOKEN.search(_text(first.get("message", {}).get("content")))
    return found.group(0) if found else None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(part.get("text") if isinstance(part, dict) else part)
                         for part in content)
    return ""


def _grant(project: Path, token: str, backends: tuple[str, ...]) -> Any:
    from openprose import state

    for backend in backends:
        if backend == "sqlite" and not any((project / ".prose" / "runs").glob("*/state.db")):
            continue
        try:
            store = state.open_store(project, backend)
        except state.StateError:
            continue
        found = store.host_grant(token) if token.startswith("gs_") else \
            store.token_grant(token)
        if found is not None and found[1].get("alive"):
            return store, found[0], found[1]
        store.close()
    return None


def _check(gate: Gate, tool: str, args: dict[str, Any]
           ) -> tuple[Decision, str, str | None]:
    """(decision, subject, verdict): verdict "deny", "ask" or ``None`` (the host decides)."""
    if tool in PATH_TOOLS:
        key, write, search = PATH_TOOLS[tool]
        subject = str(args.get(key) or gate.project)
        decision, _ = gate.path(subject, write=write, listing=search)
        pattern = args.get(SEARCH_GLOBS.get(tool, ""))
        if decision.allowed and isinstance(pattern, str) and pattern:
            decision, subject = _glob_decision(gate, subject, pattern), pattern
        return decision, subject, None if decision.allowed else "deny"
    if tool == "Bash":
        command = str(args.get("command") or "")
        mode = gate.permissions.bash
        if mode == "prompt" and not gate.vouches(command):
            return Decision(True, "bash: prompt, left to the host's prompt", command), \
                command, "ask"
        decision = _sync(gate.command(command))
        return decision, command, None if decision.allowed else "deny"
    subject = str(args.get("url") or args.get("query") or "")
    mode = gate.permissions.network
    if mode == "prompt":
        return Decision(True, "network: prompt, left to the host's prompt", subject), \
            subject, "ask"
    decision = _sync(gate.network(ask=False))
    hosts, host = gate.domains(), host_of(subject)
    if decision.allowed and hosts is not None and (tool != "WebFetch" or not any(
            host == h or host.endswith("." + h) for h in hosts)):
        decision = Decision(False, f"network: {list(gate.permissions.network or ())}", subject,
                            f"refused: agent '{gate.agent}' may not reach {subject!r} "
                            f"(network: {list(gate.permissions.network or ())})")
    return decision, subject, None if decision.allowed else "deny"


def _glob_decision(gate: Gate, root: str, pattern: str) -> Decision:
    """May a search under ``root`` use ``pattern``? Its fixed prefix (absolute, ``~/…`` or
    relative to ``root``) is checked as a place to search, so ``../../etc/*`` or
    ``/home/*/.ssh/*`` reaches no further than a path would; a ``..`` or a braced path past
    the first wildcard cannot be checked that way and is refused."""
    parts = pattern.split("/")
    cut = next((i for i, part in enumerate(parts) if _WILDCARD.search(part)), len(parts))
    fixed, rest = "/".join(parts[:cut]), "/".join(parts[cut:])
    if _LEAVES.search(rest):
        rule = "a glob may not leave its search root after a wildcard"
        return Decision(False, rule, pattern, f"refused: agent '{gate.agent}' may not search "
                                              f"{pattern!r} ({rule})")
    if pattern.startswith(("/", "~")):
        base = os.path.expanduser(fixed or "/")
    else:
        base = os.path.join(os.path.expanduser(root), fixed) if fixed else root
    decision, _ = gate.path(base, write=False, listing=True)
    if decision.allowed:
        return decision
    return Decision(False, decision.rule, pattern,
                    f"{decision.message} (the glob {pattern!r} searches there)")


def _sync(awaitable: Any) -> Decision:
    import asyncio

    return asyncio.run(awaitable)


def _launched(work: dict[str, Any], grant: dict[str, Any], record: ToolRecord) -> Any:
    from openprose.state.models import JournalEntry

    meta = {**record.to_meta(), "host": "claude-code", "at": time.time()}
    if record.allowed:
        meta["model"] = record.subject  # the model the session really runs on
    if work.get("line"):
        meta["line"] = work["line"]
    return JournalEntry(str(work.get("key") or grant.get("name")), "tool",
                        status="allowed" if record.allowed else "refused", meta=meta)


def _entry(key: str, tool: str, subject: str, decision: Decision, gate: Gate,
           started: float) -> Any:
    from openprose.state.models import JournalEntry

    record = ToolRecord(tool, subject, decision.allowed, decision.rule, gate.agent,
                        duration_s=round(time.monotonic() - started, 3))
    return JournalEntry(key, "tool", status="allowed" if decision.allowed else "refused",
                        meta={**record.to_meta(), "host": "claude-code", "at": time.time()})
