"""Driving `prose` on a pseudo-terminal in tests: start it, read until a text appears, and
make sure it is gone (and the terminal closed) afterwards."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PROSE = str(Path(sys.executable).with_name("prose"))


@contextmanager
def on_terminal(args: list[str], cwd: Path | None = None,
                term: str = "dumb") -> Iterator[tuple[subprocess.Popen, int]]:
    """``prose ARGS`` with a new pseudo-terminal as its stdin, stdout and stderr: the process
    and the terminal's parent end; killed (if still running) and closed after."""
    parent, child = pty.openpty()
    proc = subprocess.Popen([PROSE, *args], cwd=cwd, stdin=child, stdout=child, stderr=child,
                            close_fds=True, env={**os.environ, "TERM": term, "COLUMNS": "100"})
    os.close(child)
    try:
        yield proc, parent
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(parent)


def read_until(fd: int, needle: bytes, timeout: float = 30.0) -> bytes:
    """All read from ``fd`` until ``needle`` appears or the other end closes; an
    AssertionError with the tail seen if it has not appeared within ``timeout`` seconds."""
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"never saw {needle!r}; got {seen[-2000:]!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    return seen
