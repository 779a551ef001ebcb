"""A refused resume changes nothing: the run's record (run.json, the run row) and state.md
stay byte for byte as they were, whatever the refusal (edited program, a program that no
longer compiles, another driver holding the run)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from tests.engine.cli_procs import make_project

from openprose.cli import cli
from openprose.state import open_store

PROGRAM = '''\
let a = session "first"
let b = session "second"
  context: a
output c = session "third"
  context: b
'''
BROKEN = '''\
sessions:
  - match: "third"
    fail: 9
    error: outage
default_output: ok
'''


@pytest.fixture
def project(tmp_path, backend, monkeypatch):
    yield from make_project(tmp_path / "project", PROGRAM, BROKEN, backend, monkeypatch)


def _prose(project, *args):
    return CliRunner().invoke(cli, [*args, "--project", str(project), "--provider", "scripted",
                                    "--script", str(project / "s.yaml")])


def _snapshot(project, backend, run_id):
    """Everything a refusal must leave alone: the run record (as stored) and state.md."""
    with open_store(project, backend) as store:
        record = store.backend.load_run(run_id)
        text = store.backend.read_state(run_id)
    raw = None
    if backend == "filesystem":
        raw = (project / ".prose" / "runs" / run_id / "run.json").read_bytes()
    return record, text, raw


def test_a_refused_resume_changes_nothing(project, backend):
    failed = _prose(project, "run", str(project / "p.prose"), "--state", backend, "--json")
    assert failed.exit_code == 1, failed.output
    run_id = json.loads(failed.stdout.strip().splitlines()[-1])["run_id"]
    before = _snapshot(project, backend, run_id)
    assert before[0].status == "failed"

    edited = project / "edited.prose"
    edited.write_text(PROGRAM.replace("second", "another second"))
    mismatch = _prose(project, "resume", run_id, "--state", backend, "--program", str(edited))
    assert mismatch.exit_code == 2 and "no longer matches" in mismatch.output
    assert _snapshot(project, backend, run_id) == before

    broken = project / "broken.prose"
    broken.write_text("let = \n")
    garbage = _prose(project, "resume", run_id, "--state", backend, "--program", str(broken))
    assert garbage.exit_code == 2 and "no longer compiles" in garbage.output
    assert _snapshot(project, backend, run_id) == before

    with open_store(project, backend) as store, store.driver_lock(run_id):
        locked = _prose(project, "resume", run_id, "--state", backend)
    assert locked.exit_code == 2 and "is being driven by pid" in locked.output
    assert _snapshot(project, backend, run_id) == before
