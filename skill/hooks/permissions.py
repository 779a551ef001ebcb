"""The plugin's PreToolUse hook: hand the event to ``prose hook pre-tool-use``, which applies
the OpenProse session's permissions to a call its subagent makes (and records it).

Standard library only, like bin/prose_mcp.py, whose search for the installed ``prose`` it
uses. Without a ``prose`` no OpenProse run can be under way here, so nothing is decided.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bin"))

from prose_mcp import find_prose


def main() -> int:
    prose = find_prose()
    if prose is None:
        return 0
    event = sys.stdin.buffer.read()
    done = subprocess.run([str(prose), "hook", "pre-tool-use"], input=event,
                          capture_output=True, check=False)
    sys.stdout.buffer.write(done.stdout)
    if done.returncode != 0:
        sys.stderr.buffer.write(done.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
