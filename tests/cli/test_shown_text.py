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
    # written out (the preview column ends at the 80th column, before the value's U+202E;
    # its other columns are no longer squeezed to make room)
    assert "\\x1b]52;c;" in shown and "\\x07\\x1b[2J" in shown
    assert "[bold]" in shown  # markup in a value is shown, not applied
    # piped, a binding's value is exact (a script gets what the run holds)
    piped = project.prose("show", run_id, "notes", "--project", str(project.root)).stdout
    stored = json.loads(project.prose("show", run_id, "notes", "--json", "--project",
                                      str(project.root)).stdout)["value"]
    assert piped.rstrip("\n") == stored and "\x1b]52;c;" in stored


def on_terminal(*args: str) -> str:
    """What ``prose ARGS`` writes to a terminal (stdout and stderr on one pty)."""
    leader, follower = pty.openpty()
    process = subprocess.Popen([PROSE, *args], stdout=follower, stderr=follower,
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
    process.wait(timeout=60)
    return output.decode()


def no_sequence_of_the_run(text: str) -> None:
    assert "\x1b]52" not in text and "\x1b]0;" not in text and "\u202e" not in text
    assert "\x07" not in text


def test_show_of_a_binding_on_a_terminal_writes_them_out_too(project: Project) -> None:
    run_id = started(project)
    text = on_terminal("show", run_id, "topic", "--project", str(project.root))
    no_sequence_of_the_run(text)
    assert "\\x1b]52;c;" in text


def test_run_writes_out_control_characters_of_outputs_and_errors(project: Project) -> None:
    """prose run printed its outputs and its error as they were, on a terminal too."""
    project.write("p.prose", 'output o = session "Research"\n')
    project.write("s.yaml", SCRIPT)
    text = on_terminal("run", str(project.root / "p.prose"), "--provider", "scripted",
                       "--script", str(project.root / "s.yaml"), "--state", project.backend,
                       "--project", str(project.root))
    no_sequence_of_the_run(text)
    assert "notes \\x1b]52;c;" in text
    project.write("f.prose", f'session "Research"\nthrow "{EVIL}"\n')
    text = on_terminal("run", str(project.root / "f.prose"), "--provider", "scripted",
                       "--script", str(project.root / "s.yaml"), "--state", project.backend,
                       "--project", str(project.root))
    no_sequence_of_the_run(text)
    assert "error: " in text


def test_a_diagnostic_shows_the_line_with_its_control_characters_blanked(
        project: Project) -> None:
    project.write("c.prose", f'output o = session "{EVIL}" +\n')
    result = project.prose("compile", str(project.root / "c.prose"))
    no_sequence_of_the_run(result.stdout + result.stderr)
    assert "\ufffd" in result.stdout + result.stderr


def test_update_shows_a_cloned_folder_name_with_its_control_characters_written_out(
        tmp_path: Path) -> None:
    """A repository's .prose/execution/ can hold a folder whose name is an escape sequence:
    prose update printed it as it was."""
    (tmp_path / ".prose" / "execution" / f"run{EVIL[:20]}").mkdir(parents=True)
    result = Project(tmp_path, "filesystem").prose("update", "--dry-run", "--project",
                                                   str(tmp_path))
    no_sequence_of_the_run(result.stdout + result.stderr)
    assert "would move .prose/execution/run\\x1b]52" in result.stdout
