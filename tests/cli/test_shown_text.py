"""Text a run holds (a value, an error, a statement: written by a program or a model, which
may have read anything) reaches the terminal with its control characters written out: an
escape sequence in it could set the window title, write the clipboard (OSC 52), or hide and
redraw what `prose show` shows."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

from tests.cli.conftest import Project, run_id_of

EVIL = "\x1b]52;c;cHduZWQ=\x07\x1b[2J\x1b]0;TITLE\x07\u202egnp.exe"
PROGRAM = 'input topic: "what"\nlet notes = session "Research {topic}"\n'
SCRIPT = f'default_output: "notes {EVIL.encode("unicode_escape").decode()}"\n'
PROSE = str(Path(sys.executable).with_name("prose"))


def started(project: Project) -> str:
    result = project.run(PROGRAM, SCRIPT, "--input", f"topic=[bold]{EVIL}")
    assert result.exit_code == 0, result.stderr
    return run_id_of(result)


def test_show_writes_out_control_characters_of_values(project: Project) -> None:
    run_id = started(project)
    shown = project.prose("show", run_id, "--project", str(project.root)).stdout
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert "\\x1b]52;c;" in shown and "\\u202e" in shown
    assert "[bold]" in shown  # markup in a value is shown, not applied
    # piped, a binding's value is exact (a script gets what the run holds)
    piped = project.prose("show", run_id, "notes", "--project", str(project.root)).stdout
    stored = json.loads(project.prose("show", run_id, "notes", "--json", "--project",
                                      str(project.root)).stdout)["value"]
    assert piped.rstrip("\n") == stored and "\x1b]52;c;" in stored


def test_show_of_a_binding_on_a_terminal_writes_them_out_too(project: Project) -> None:
    run_id = started(project)
    leader, follower = pty.openpty()
    process = subprocess.Popen([PROSE, "show", run_id, "topic", "--project",
                                str(project.root)], stdout=follower, stderr=subprocess.PIPE,
                               env={**os.environ, "TERM": "xterm"})
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    assert process.wait(timeout=60) == 0, process.stderr.read() if process.stderr else ""
    text = output.decode()
    assert "\x1b]52" not in text and "\x07" not in text and "\\x1b]52;c;" in text
