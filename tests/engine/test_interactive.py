"""On a terminal, `prose run` asks for a missing input instead of failing."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROSE = str(Path(sys.executable).with_name("prose"))
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _read_until(fd: int, needle: bytes, timeout: float = 30.0) -> bytes:
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


@pytest.mark.skipif(not hasattr(pty, "openpty"), reason="needs a pseudo-terminal")
def test_missing_input_is_asked_for_on_a_terminal(tmp_path):
    parent, child = pty.openpty()
    proc = subprocess.Popen(
        [PROSE, "run", str(EXAMPLES / "hello.prose"), "--provider", "scripted",
         "--script", str(EXAMPLES / "hello.script.yaml"), "--project", str(tmp_path)],
        stdin=child, stdout=child, stderr=child, close_fds=True,
        env={**os.environ, "TERM": "dumb", "COLUMNS": "100"})
    os.close(child)
    try:
        prompt = _read_until(parent, b"topic")
        assert b"What to research" in prompt
        os.write(parent, b"coral reefs\r")
        rest = _read_until(parent, b"A twelve-hour rhythm")
        assert proc.wait(timeout=30) == 0, rest.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(parent)
    run_dir = next((tmp_path / ".prose" / "runs").iterdir())
    topic = (run_dir / "bindings" / "topic.md").read_text()
    assert topic.rstrip().endswith("coral reefs")
    research = (run_dir / "bindings" / "research.md").read_text()
    assert "Facts about coral reefs" in research
