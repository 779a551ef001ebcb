"""The plugin's PreToolUse hook: hand the event to ``prose hook pre-tool-use``, which applies
the OpenProse session's permissions to a call its subagent makes (and records it).

Standard library only, like bin/prose_mcp.py, whose search for the installed ``prose`` it
uses. Without a ``prose`` no OpenProse run can be under way here, so nothing is decided.
It fails closed: when ``prose hook`` crashes, hangs or answers garbage, a subagent's call
(possibly an OpenProse session's, which nothing then checked) is refused with the reason;
the main agent's calls are never ours to decide.
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
    prose = find_prose()
    if prose is None:
        return 0
    event = sys.stdin.buffer.read()
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


def _refuse(event: bytes, why: str) -> int:
    try:
        subagent = bool(json.loads(event).get("agent_id"))
    except (ValueError, AttributeError):
        subagent = True  # an event we cannot read is not let through unchecked
    if subagent:
        reason = (f"refused: OpenProse could not check this call against the session's "
                  f"permissions ({why}); run `prose doctor` in the project")
        json.dump({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                          "permissionDecision": "deny",
                                          "permissionDecisionReason": reason}}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
