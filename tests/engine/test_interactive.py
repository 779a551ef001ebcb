"""On a terminal, `prose run` asks for a missing input instead of failing."""

from __future__ import annotations

import ctypes
import os
import pty
import select
import signal
import subprocess
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from tests.engine.terminal import on_terminal, read_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.skipif(not hasattr(pty, "openpty"), reason="needs a pseudo-terminal")
def test_missing_input_is_asked_for_on_a_terminal(tmp_path):
    with on_terminal(["run", str(EXAMPLES / "hello.prose"), "--provider", "scripted",
                      "--script", str(EXAMPLES / "hello.script.yaml"),
                      "--project", str(tmp_path)]) as (proc, parent):
        prompt = read_until(parent, b"topic")
        assert b"What to research" in prompt
        os.write(parent, b"coral reefs\r")
        rest = read_until(parent, b"A twelve-hour rhythm")
        assert proc.wait(timeout=30) == 0, rest.decode(errors="replace")
    run_dir = next((tmp_path / ".prose" / "runs").iterdir())
    topic = (run_dir / "bindings" / "topic.md").read_text()
    assert topic.rstrip().endswith("coral reefs")
    research = (run_dir / "bindings" / "research.md").read_text()
    assert "Facts about coral reefs" in research


def _spawn(tmp_path: Path, program: str, script: str,
           term: str = "dumb") -> AbstractContextManager[tuple[subprocess.Popen, int]]:
    (tmp_path / "p.prose").write_text(program)
    (tmp_path / "s.yaml").write_text(script)
    return on_terminal(["run", "p.prose", "--provider", "scripted", "--script", "s.yaml"],
                       cwd=tmp_path, term=term)


def _calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return [line for line in lines if '"phase": "start"' in line]


@pytest.mark.skipif(not hasattr(pty, "openpty"), reason="needs a pseudo-terminal")
def test_ctrl_c_at_an_input_prompt_interrupts_at_once(tmp_path):
    with _spawn(tmp_path, 'let a = session "first"\ninput topic: "What next?"\n'
                          'let b = session "second"\nlet c = session "third"\n',
                "default_output: ok\ncall_log: calls.jsonl\n") as (proc, parent):
        read_until(parent, b"What next?")
        proc.send_signal(signal.SIGINT)
        rest = read_until(parent, b"prose resume")
        assert proc.wait(timeout=30) == 130, rest.decode(errors="replace")
    assert len(_calls(tmp_path)) == 1  # "second" and "third" never ran
    run_dir = next((tmp_path / ".prose" / "runs").iterdir())
    from openprose.state import open_store

    with open_store(tmp_path) as store:
        assert store.open_run(run_dir.name).status == "interrupted"


def _tgkill() -> Any:
    """glibc's tgkill (a signal to one thread of another process), or None."""
    try:
        return ctypes.CDLL(None, use_errno=True).tgkill
    except (AttributeError, OSError):
        return None


@pytest.mark.skipif(not Path("/proc/self/task").is_dir() or _tgkill() is None,
                    reason="needs Linux's /proc and glibc's tgkill")
def test_ctrl_c_delivered_to_the_prompt_thread_still_interrupts(tmp_path):
    """The kernel hands a process's signal to any thread that does not block it, here the
    one reading the terminal: the run must stop as if the main thread had got it."""
    with _spawn(tmp_path, 'let a = session "first"\ninput topic: "What next?"\n'
                          'let b = session "second"\n',
                "default_output: ok\ncall_log: calls.jsonl\n") as (proc, parent):
        read_until(parent, b"What next?")
        others = [int(tid.name) for tid in Path(f"/proc/{proc.pid}/task").iterdir()
                  if int(tid.name) != proc.pid]
        assert others, "the prompt runs on a thread of its own"
        # the thread reading the terminal (the others, if any, wait elsewhere)
        reader = next((tid for tid in others if _syscall(proc.pid, tid) in READ_SYSCALLS),
                      others[0])
        assert _tgkill()(proc.pid, reader, signal.SIGINT) == 0
        rest = read_until(parent, b"prose resume")
        assert proc.wait(timeout=30) == 130, rest.decode(errors="replace")
    assert len(_calls(tmp_path)) == 1  # "second" never ran


READ_SYSCALLS = {"0", "63"}  # read(2) on x86-64 and on arm64


def _syscall(pid: int, tid: int) -> str:
    """The number of the system call thread ``tid`` waits in ("" if it cannot be told)."""
    try:
        return Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()[0]
    except (OSError, IndexError):
        return ""


@pytest.mark.skipif(not hasattr(pty, "openpty"), reason="needs a pseudo-terminal")
def test_typed_input_stays_visible_while_the_progress_display_runs(tmp_path):
    with _spawn(tmp_path, 'let a = session "first"\ninput topic: "What next?"\n'
                          'output b = session "second {topic}"\n',
                "default_output: ok\nlatency: 0.2\n", term="xterm") as (proc, parent):
        read_until(parent, b"What next?")
        os.write(parent, b"coral")
        # the progress display redraws 8 times a second: a second of quiet shows it stepped
        # aside; anything it drew would cover what the user is typing
        seen = b""
        deadline = time.monotonic() + 1.0
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([parent], [], [], left)
            if ready:
                seen += os.read(parent, 4096)
        assert b"sessions:" not in seen, seen
        assert b"coral" in seen  # the terminal echoes what was typed, and nothing erases it
        os.write(parent, b" reefs\r")
        read_until(parent, b"completed")
        assert proc.wait(timeout=30) == 0
