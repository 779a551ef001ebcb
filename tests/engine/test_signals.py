"""SIGTERM ends a run the way Ctrl-C does, and a double Ctrl-C still ends with the message:
the run is marked interrupted, consistent and resumable (real `prose` processes)."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from tests.engine.cli_procs import (
    CLI,
    SCRIPTED,
    TWO_STEPS,
    make_project,
    prose,
    run_id_of,
    starts,
    stop,
    two_steps_script,
    wait_for,
)

from openprose.state import open_store

PROGRAM = TWO_STEPS
SCRIPT = two_steps_script(0.6)
HELD = two_steps_script(0.6, final=3600)  # the run is alive when the signal comes


@pytest.fixture
def project(tmp_path, backend, monkeypatch):
    yield from make_project(tmp_path / "project", PROGRAM, HELD, backend, monkeypatch)


def _interrupt(project, backend, signals, gap=0.0):
    run = prose(project, "run", "p.prose", "--state", backend, *SCRIPTED, "--json", name="run")
    try:
        wait_for(lambda: len(starts(project)) >= 1, "a session's start", run)
        for i, sig in enumerate(signals):
            if i:
                time.sleep(gap)
            run.send_signal(sig)
        run.wait(timeout=120)
    finally:
        stop(run)
    run_id = run_id_of(project, "run")
    err = (project / "run.err").read_text()
    return run, run_id, err


def _status(project, backend, run_id):
    with open_store(project, backend) as store:
        return {info.id: info.status for info in store.list_runs()}[run_id]


def test_sigterm_interrupts_like_ctrl_c_and_the_run_resumes(project, backend):
    run, run_id, err = _interrupt(project, backend, [signal.SIGTERM])
    assert run.returncode == 130, err
    assert err.strip().splitlines()[-1] == \
        f"interrupted; the run is consistent: prose resume {run_id}"
    assert "Traceback" not in err
    assert _status(project, backend, run_id) == "interrupted"
    (project / "s.yaml").write_text(SCRIPT)
    resumed = subprocess.run([*CLI, "resume", run_id, "--state", backend, *SCRIPTED, "--json"],
                             cwd=project, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["outputs"] == {"o": "final"}
    assert _status(project, backend, run_id) == "completed"


@pytest.mark.parametrize("backend", ["filesystem"])
@pytest.mark.parametrize("gap", [0.0, 0.002, 0.02, 0.06, 0.2])
def test_a_double_ctrl_c_still_ends_with_the_message(project, backend, gap):
    run, run_id, err = _interrupt(project, backend, [signal.SIGINT, signal.SIGINT], gap)
    assert run.returncode == 130, err
    assert err.strip().splitlines()[-1] == \
        f"interrupted; the run is consistent: prose resume {run_id}"
    assert "Traceback" not in err
    assert _status(project, backend, run_id) == "interrupted"
