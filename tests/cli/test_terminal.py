"""The inspecting commands on a real terminal (a pseudo-terminal 132 columns wide): colour
there, at most 80 columns still; and `--json` on every one of them."""

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


def on_a_terminal(*args: str, cwd: Path) -> str:
    """Run ``prose ARGS`` with stdout on a pseudo-terminal 132 columns wide."""
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 132, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "132"}
    env.pop("NO_COLOR", None)
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


@pytest.mark.parametrize("project", ["filesystem", "sqlite"], indirect=True)
def test_colour_on_a_terminal_within_80_columns(project: Project) -> None:
    run_id = run_id_of(project.run(FAILING))
    for args in (["runs"], ["show", run_id], ["doctor"], ["clean", "--keep", "0", "--dry-run"]):
        text = on_a_terminal(*args, "--project", str(project.root), cwd=project.root)
        assert ANSI.search(text), (args, text)  # coloured on a terminal
        plain = ANSI.sub("", text)
        assert all(len(line) <= 80 for line in plain.splitlines()), (args, plain)
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
