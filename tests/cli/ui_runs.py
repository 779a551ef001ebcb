"""Runs for the web view's tests, made by ``prose run`` on the scripted provider: one that
fails at line 3 after two sessions whose outputs are hostile HTML."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from openprose.cli import cli

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
    output: "<script>window.pwned = 1</script><img src=x onerror=\\"window.pwned = 2\\">"
  - match: "^Make"
    output: "<a href=\\"javascript:window.pwned = 3\\">click</a>"
"""


def run_failing(root: Path, backend: str) -> str:
    """Run the failing program in ``root`` on ``backend``; its run id."""
    (root / "p.prose").write_text(FAILING)
    (root / "s.yaml").write_text(HOSTILE)
    result = CliRunner().invoke(cli, ["run", str(root / "p.prose"), "--provider", "scripted",
                                      "--script", str(root / "s.yaml"), "--state", backend,
                                      "--project", str(root)])
    assert result.exit_code == 1, result.output
    return next(line.split()[1] for line in result.stderr.splitlines()
                if line.startswith("run ") and line.endswith(" started"))
