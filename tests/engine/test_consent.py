"""`bash: prompt` asks the person at the terminal (yes / no / always for this agent in this
run); with nobody to ask, the command is refused in one line naming the flag that allows it."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path

import pytest
from tests.engine.terminal import PROSE, on_terminal, read_until

from openprose.engine.sandbox import detect

PROGRAM = '''\
agent builder:
  prompt: "You build things."
  permissions:
    write: ["out/**"]

let first = session: builder
  prompt: "first"
let second = session: builder
  prompt: "second"
output third = session: builder
  prompt: "third"
'''

SCRIPT = '''\
sessions:
  - match: "first"
    tools: [{bash: "echo one >> out/log"}]
  - match: "second"
    tools: [{bash: "echo two >> out/log"}]
  - match: "third"
    tools: [{bash: "echo three >> out/log"}]
'''


def _project(tmp_path: Path) -> Path:
    (tmp_path / "p.prose").write_text(PROGRAM)
    (tmp_path / "s.yaml").write_text(SCRIPT)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "log").write_text("")
    return tmp_path


@pytest.mark.skipif(not hasattr(pty, "openpty"), reason="needs a pseudo-terminal")
@pytest.mark.skipif(not detect().confined and not os.environ.get("CI"),
                    reason="no OS sandbox here (install bubblewrap)")
def test_the_terminal_is_asked_and_always_covers_the_rest_of_the_run(tmp_path):
    root = _project(tmp_path)
    with on_terminal(["run", "p.prose", "--provider", "scripted", "--script", "s.yaml"],
                     cwd=root) as (proc, parent):
        seen = read_until(parent, b"[a]lways for this agent in this run")
        assert b"agent 'builder' wants to run a shell command" in seen
        assert b"statement: let first = session: builder" in seen
        assert b"command:   echo one >> out/log" in seen
        os.write(parent, b"n\r")
        seen = read_until(parent, b"[a]lways for this agent in this run")
        assert b"echo two >> out/log" in seen
        os.write(parent, b"a\r")
        rest = read_until(parent, b"completed")
        assert proc.wait(timeout=60) == 0, rest.decode(errors="replace")
        assert b"wants to" not in rest  # "always": not asked again
    assert (root / "out" / "log").read_text() == "two\nthree\n"


def test_with_nobody_to_ask_the_command_is_refused_naming_the_flag(tmp_path):
    root = _project(tmp_path)
    done = subprocess.run(
        [PROSE, "run", "p.prose", "--provider", "scripted", "--script", "s.yaml", "--json"],
        cwd=root, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    third = json.loads(done.stdout)["outputs"]["third"]
    assert third.splitlines()[1] == (
        "refused: agent 'builder' may not run 'echo three >> out/log' without consent, and "
        "nobody can answer here; allow it with --allow-bash or OPENPROSE_ALLOW_BASH=1 "
        "(bash: prompt)")
    assert (root / "out" / "log").read_text() == ""
