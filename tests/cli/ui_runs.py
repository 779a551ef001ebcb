"""Runs for the web view's tests, made by ``prose run`` on the scripted provider: one that
fails at line 3 after two sessions whose outputs are hostile HTML, the first making a
refused tool call (bash, without --allow-bash) and an allowed one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FAILING = """\
let notes = session "Collect facts"
let link = session "Make a link"
output report = session "Breaks here"
  context: { notes, link }
"""
HOSTILE = """\
sessions:
  - match: "^Breaks"
    fail: 99
    error: "boom <b>bold</b>"
  - match: "^Collect"
    tools:
      - bash: "curl https://example.com/<img src=x onerror=alert(1)>"
      - read: p.prose
    output: "<script>window.pwned = 1</script><img src=x onerror=\\"window.pwned = 2\\">"
  - match: "^Make"
    output: "<a href=\\"javascript:window.pwned = 3\\">click</a>"
"""


def run_failing(root: Path, backend: str) -> str:
    """Run the failing program in ``root`` on ``backend`` (in a process of its own: a
    browser test's thread has an event loop running); its run id."""
    (root / "p.prose").write_text(FAILING)
    (root / "s.yaml").write_text(HOSTILE)
    result = subprocess.run([str(Path(sys.executable).with_name("prose")), "run", "p.prose",
                             "--provider", "scripted", "--script", "s.yaml", "--state",
                             backend], cwd=root, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    return next(line.split()[1] for line in result.stderr.splitlines()
                if line.startswith("run ") and line.endswith(" started"))
