"""Real `prose` processes for kill tests: start a run, wait until a session is in flight
(the scripted provider's call log says so), SIGKILL it, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import PG_URL

CLI = [sys.executable, "-c", "from openprose.cli import main; main()"]


def env() -> dict[str, str]:
    extra = {"OPENPROSE_POSTGRES_URL": PG_URL} if PG_URL else {}
    return {**os.environ, **extra}


def project(root: Path, program: str, script: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "p.prose").write_text(program)
    (root / "s.yaml").write_text(script)
    return root


def start(root: Path, args: list[str], stderr: Path) -> subprocess.Popen[str]:
    with open(stderr, "w") as err:
        return subprocess.Popen([*CLI, *args], cwd=root, stdout=subprocess.PIPE, stderr=err,
                                text=True, env=env())


def run_args(backend: str, script: str = "s.yaml") -> list[str]:
    return ["run", "p.prose", "--state", backend, "--provider", "scripted", "--script", script,
            "--json"]


def resume_args(run_id: str, backend: str, script: str = "s.yaml") -> list[str]:
    return ["resume", run_id, "--state", backend, "--provider", "scripted", "--script", script,
            "--json"]


def calls(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


def wait_for_call(log: Path, key: str, phase: str = "start", timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(c["key"] == key and c["phase"] == phase for c in calls(log)):
            return
        time.sleep(0.02)
    raise AssertionError(f"no {phase} of session {key} within {timeout}s")


def kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def run_id_of(stderr: Path) -> str:
    for line in stderr.read_text().splitlines():
        if line.startswith("run ") and " started" in line:
            return line.split()[1]
    raise AssertionError(f"no run id in {stderr.read_text()!r}")


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> dict:
    out, _ = proc.communicate(timeout=timeout)
    assert out, f"no result (exit {proc.returncode})"
    return json.loads(out)


def kill_during(root: Path, backend: str, key: str) -> str:
    """Start the run, SIGKILL it once session ``key`` is calling the model; its run id."""
    proc = start(root, run_args(backend), root / "err0.txt")
    try:
        wait_for_call(root / "calls.jsonl", key)
    finally:
        kill(proc)
    return run_id_of(root / "err0.txt")


def started(log: Path) -> list[str]:
    return [c["key"] for c in calls(log) if c["kind"] == "session" and c["phase"] == "start"]
