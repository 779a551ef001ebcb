"""The small project both attack suites start from: one program with an input, a session and
an output that reads the session's result."""

from __future__ import annotations

from pathlib import Path

PROGRAM = """\
input topic: "what to look into"
let notes = session "Research {topic}"
output summary = session "Summarize"
  context: notes
"""


def make_project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "p.prose").write_text(PROGRAM)
    return project
