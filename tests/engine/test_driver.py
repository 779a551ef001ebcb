"""One driver per run, from outside: real `prose run` / `prose resume` processes.

A resume while the original run is alive is refused at once, naming the holder; after the
holder is SIGKILLed, concurrent resumes start no session twice (one drives, the others are
refused or find the run finished); on filesystem, SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

PROGRAM = '''\
let a = session "step A"
let b = session "step B"
let c = session "step C"
output o = session "final"
  context: { a, b, c }
'''
SCRIPT = '''\
latency: 0.3
call_log: calls.jsonl
sessions:
  - match: "step (\\\\w)"
    output: "did \\\\1"
  - match: "final"
    output: "final"
    latency: 4
'''
CLI = [sys.executable, "-c", "from openprose.cli import main; main()"]
PG_URL = os.environ.get("OPENPROSE_TEST_POSTGRES_URL")
BACKENDS = ["filesystem", "sqlite", pytest.param(
    "postgres", marks=[pytest.mark.postgres, pytest.mark.skipif(
        not PG_URL, reason="needs OPENPROSE_TEST_POSTGRES_URL (scripts/pg-up)")])]
ARGS = ["--provider", "scripted", "--script", "s.yaml", "--json"]


@pytest.fixture
def project(tmp_path, backend, monkeypatch):
    root = tmp_path / "project"
    root.mkdir()
    (root / "p.prose").write_text(PROGRAM)
    (root / "s.yaml").write_text(SCRIPT)
    schema = None
    if backend == "postgres":
        schema = f"t_{uuid.uuid4().hex[:16]}"
        monkeypatch.setenv("OPENPROSE_POSTGRES_URL", PG_URL)
        monkeypatch.setenv("OPENPROSE_POSTGRES_SCHEMA", schema)
    yield root
    if schema is not None:
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _prose(root: Path, *args: str, name: str) -> subprocess.Popen:
    with open(root / f"{name}.err", "w") as err:
        return subprocess.Popen([*CLI, *args], cwd=root, stdout=subprocess.PIPE, stderr=err,
                                text=True)


def _starts(root: Path) -> list[str]:
    log = root / "calls.jsonl"
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]
    return [e["key"] for e in lines if e["kind"] == "session" and e["phase"] == "start"]


def _wait_for(predicate, what: str, proc: subprocess.Popen) -> None:
    for _ in range(600):
        if predicate():
            return
        assert proc.poll() is None, f"ended before {what}"
        time.sleep(0.05)
    raise AssertionError(f"never saw {what}")


def _run_id(root: Path, name: str) -> str | None:
    for line in (root / f"{name}.err").read_text().splitlines():
        if line.startswith("run ") and line.endswith(" started"):
            return line.split()[1]
    return None


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_driver_per_run(project, backend):
    run = _prose(project, "run", "p.prose", "--state", backend, *ARGS, name="run")
    try:
        _wait_for(lambda: "3" in _starts(project), "the final session's start", run)
        run_id = _run_id(project, "run")
        assert run_id, (project / "run.err").read_text()
        # The original run is alive: a resume is refused at once, with one clear line.
        early = subprocess.run([*CLI, "resume", run_id, "--state", backend, *ARGS],
                               cwd=project, capture_output=True, text=True, timeout=120)
        assert early.returncode == 2, early.stderr
        assert f"is being driven by pid {run.pid} on " in early.stderr
        assert "Traceback" not in early.stderr
        assert len(early.stderr.strip().splitlines()) == 1, early.stderr
        assert run.poll() is None  # it did not disturb the driver
        os.kill(run.pid, signal.SIGKILL)  # during the final session (4 s)
        run.wait(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        run.stdout.close()
    before = len(_starts(project))
    # Two resumes at once after the kill: no session is started twice.
    resumes = [_prose(project, "resume", run_id, "--state", backend, *ARGS, name=f"r{i}")
               for i in range(2)]
    results = []
    for proc in resumes:
        out, _ = proc.communicate(timeout=120)
        results.append((proc, out, (project / f"r{resumes.index(proc)}.err").read_text()))
    after = _starts(project)[before:]
    assert len(after) == len(set(after)), f"a session started twice: {after}"
    finished = [json.loads(out) for proc, out, _ in results if proc.returncode == 0]
    assert finished and all(o["outputs"] == {"o": "final"} for o in finished)
    for proc, _, err in results:
        if proc.returncode != 0:
            assert proc.returncode == 2 and "is being driven by pid " in err, err
            assert "Traceback" not in err
    assert "3" in after  # the final session ran after the kill, once
