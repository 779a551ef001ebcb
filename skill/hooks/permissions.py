"""The plugin's PreToolUse hook: hand the event to ``prose hook pre-tool-use``, which applies
the OpenProse session's permissions to a call its subagent makes (and records it).

Claude Code runs it before every tool call (the matcher is ``*``: a session may be offered
any tool, and one we cannot check must be refused, not skipped). The main agent's calls are
never ours to decide, so they return at once without starting ``prose``, except a launch of a
subagent (``Agent``), whose model ``prose hook`` checks against the session's agent.

Standard library only, like bin/prose_mcp.py, whose search for the installed ``prose`` it
uses. Without a ``prose`` no OpenProse run can be under way here, so nothing is decided.
It fails closed: when ``prose hook`` crashes, hangs or answers garbage, a subagent's call
(possibly an OpenProse session's, which nothing then checked) is refused with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bin"))

from prose_mcp import find_prose

#: Seconds ``prose hook`` may take (Claude Code's own limit for a hook is 60).
TIMEOUT = 45


def main() -> int:
    event = sys.stdin.buffer.read()
    if not _subagent(event) and not _launch(event):
        return 0
    prose = find_prose()
    if prose is None:
        return 0
    try:
        done = subprocess.run([str(prose), "hook", "pre-tool-use"], input=event,
                              capture_output=True, check=False, timeout=TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as err:
        return _refuse(event, f"{type(err).__name__}: {err}")
    if done.returncode != 0 or not _is_answer(done.stdout):
        problem = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return _refuse(event, f"`prose hook` exited {done.returncode}"
                              + (f": {problem[-1][:300]}" if problem else ""))
    sys.stdout.buffer.write(done.stdout)
    return 0


def _is_answer(out: bytes) -> bool:
    """Nothing (the host decides) or one JSON object: what ``prose hook`` prints."""
    if not out.strip():
        return True
    try:
        return isinstance(json.loads(out), dict)
    except ValueError:
        return False


def _subagent(event: bytes) -> bool:
    """Whether the call is a subagent's; an event we cannot read is treated as one, so it
    is not let through unchecked."""
    try:
        return bool(json.loads(event).get("agent_id"))
    except (ValueError, AttributeError):
        return True


def _launch(event: bytes) -> bool:
    """Whether the main agent is starting a subagent (``Agent``), which may be an OpenProse
    session's: ``prose hook`` checks it runs on the model the session's agent names."""
    try:
        return json.loads(event).get("tool_name") == "Agent"
    except (ValueError, AttributeError):
        return False


def _refuse(event: bytes, why: str) -> int:
    if _subagent(event):
        reason = (f"refused: OpenProse could not check this call against the session's "
                  f"permissions ({why}); run `prose doctor` in the project")
        json.dump({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                          "permissionDecision": "deny",
                                          "permissionDecisionReason": reason}}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
