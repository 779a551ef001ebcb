"""The inspecting commands on a real terminal (a pseudo-terminal, 132 columns wide unless a
test sets another width): colour there, the terminal's width used and never exceeded; and
`--json` on every one of them."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from tests.cli.conftest import Project, run_id_of

from openprose.cli import cli

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
INSPECTING = ["runs", "show", "watch", "examples", "help", "update", "doctor", "clean"]
FAILING = 'let research = session "Collect facts"\nthrow "no facts found"\n'


def on_a_terminal(*args: str, cwd: Path, columns: int = 132) -> str:
    """Run ``prose ARGS`` with stdout on a pseudo-terminal ``columns`` wide (its size set on
    the terminal itself, as ``stty cols`` does; no COLUMNS in the environment)."""
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    env.pop("COLUMNS", None)
    proc = subprocess.Popen([sys.executable, "-c", "from openprose.cli import main; main()",
                             *args], cwd=cwd, stdout=secondary, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env)
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=120)
    os.close(primary)
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


def test_colour_on_a_terminal_within_its_width(project: Project) -> None:
    run_id = run_id_of(project.run(FAILING))
    for args in (["runs"], ["show", run_id], ["doctor"], ["clean", "--keep", "0", "--dry-run"]):
        text = on_a_terminal(*args, "--project", str(project.root), cwd=project.root)
        assert ANSI.search(text), (args, text)  # coloured on a terminal
        plain = ANSI.sub("", text)
        assert all(len(line) <= 132 for line in plain.splitlines()), (args, plain)
        piped = project.prose(*args, "--project", str(project.root)).stdout
        assert not ANSI.search(piped)  # and not when piped
    shown = ANSI.sub("", on_a_terminal("show", run_id, "--project", str(project.root),
                                       cwd=project.root))
    assert "failed at line 2" in shown and "no facts found" in shown


def test_every_inspecting_command_has_json() -> None:
    import click

    ctx = click.Context(cli)
    for name in INSPECTING:
        command = cli.get_command(ctx, name)
        assert command is not None
        assert "--json" in {opt for param in command.params for opt in param.opts}, name


LOOPS = (Path(__file__).resolve().parents[2] / "src" / "openprose" / "examples"
         / "04-loops.prose").read_text(encoding="utf-8")
LOOPS_SCRIPT = "default_output: ok\nconditions:\n  - match: ready\n    verdicts: [false, true]\n"


@pytest.mark.parametrize("backend", ["filesystem"])  # each backend's reads: test_colour_...
def test_tables_use_the_terminal_width(project: Project) -> None:
    """On 140 columns nothing is cut; on 60, whole low-value columns go, while ids, line
    numbers and statuses stay whole and no line is wider than the terminal."""
    loops = run_id_of(project.run(LOOPS, LOOPS_SCRIPT))
    failed = run_id_of(project.run(FAILING))

    def shown(columns: int, *args: str) -> str:
        text = ANSI.sub("", on_a_terminal(*args, "--project", str(project.root),
                                          cwd=project.root, columns=columns))
        assert all(len(line) <= columns for line in text.splitlines()), text
        return text

    for args in (["runs"], ["show", loops], ["clean", "--keep", "0", "--dry-run"]):
        assert "…" not in shown(140, *args), args
    timeline = shown(140, "show", loops).split("timeline", 1)[1].split("bindings", 1)[0]
    lines = {int(m[1]) for m in re.finditer(r"^\s*(\d+)\s+\S", timeline, re.M)}
    assert {10, 13, 16, 18, 20, 21, 24} <= lines, timeline  # whole, 10 and more
    for args in (["runs"], ["clean", "--keep", "0", "--dry-run"]):
        narrow = shown(60, *args)
        assert loops in narrow and failed in narrow, narrow
        assert "completed" in narrow and "failed" in narrow
    assert "started" not in shown(60, "runs")  # a whole column left out
    failing = shown(60, "show", failed)
    assert "failed at line 2" in failing
    assert re.search(r"^\s*1\s+let research.* complete\s+\d+m?s ", failing, re.M), failing
