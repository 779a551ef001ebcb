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

import pytest
from tests.engine.cli_procs import (
    CLI,
    SCRIPTED,
    make_project,
    prose,
    run_id_of,
    starts,
    stop,
    wait_for,
)

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
    latency: FINAL
'''
ARGS = [*SCRIPTED, "--json"]


@pytest.fixture
def project(tmp_path, backend, monkeypatch):
    # The first driver's final session outlasts any machine's slowness: it is killed in it.
    yield from make_project(tmp_path / "project", PROGRAM, SCRIPT.replace("FINAL", "600"),
                            backend, monkeypatch)


def test_one_driver_per_run(project, backend):
    run = prose(project, "run", "p.prose", "--state", backend, *ARGS, name="run")
    try:
        wait_for(lambda: "3" in starts(project), "the final session's start", run)
        run_id = run_id_of(project, "run")
        assert run_id, (project / "run.err").read_text()
        # The original run is alive: a resume is refused at once, with one clear line.
        early = subprocess.run([*CLI, "resume", run_id, "--state", backend, *ARGS],
                               cwd=project, capture_output=True, text=True, timeout=120)
        assert early.returncode == 2, early.stderr
        assert f"is being driven by pid {run.pid} on " in early.stderr
        assert "Traceback" not in early.stderr
        assert len(early.stderr.strip().splitlines()) == 1, early.stderr
        assert run.poll() is None  # it did not disturb the driver
        os.kill(run.pid, signal.SIGKILL)  # during the final session
        run.wait(timeout=30)
    finally:
        stop(run)
    (project / "s.yaml").write_text(SCRIPT.replace("FINAL", "2"))  # the resumes' final: 2 s
    before = len(starts(project))
    # Two resumes at once after the kill: no session is started twice.
    resumes = [prose(project, "resume", run_id, "--state", backend, *ARGS, name=f"r{i}")
               for i in range(2)]
    results = []
    for proc in resumes:
        out, _ = proc.communicate(timeout=120)
        results.append((proc, out, (project / f"r{resumes.index(proc)}.err").read_text()))
    after = starts(project)[before:]
    assert len(after) == len(set(after)), f"a session started twice: {after}"
    finished = [json.loads(out) for proc, out, _ in results if proc.returncode == 0]
    # If no resume finished, what each said is the diagnosis (the driver's or the lock's).
    assert finished, [(proc.returncode, out, err) for proc, out, err in results]
    assert all(o["outputs"] == {"o": "final"} for o in finished), finished
    for proc, _, err in results:
        if proc.returncode != 0:
            assert proc.returncode == 2 and "is being driven by pid " in err, err
            assert "Traceback" not in err
    assert "3" in after  # the final session ran after the kill, once
