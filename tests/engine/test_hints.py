"""The run remembers how it was run (provider, script, state backend, concurrency; never a
key), so every resume hint `prose run`/`prose resume` prints works exactly as printed: here
each hint is run as printed, without flags, and the run completes."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.engine.cli_procs import (
    CLI,
    SCRIPTED,
    TWO_STEPS,
    make_project,
    prose,
    starts,
    stop,
    two_steps_script,
    wait_for,
)

from openprose.state import open_store

PROGRAM = TWO_STEPS
SCRIPT = two_steps_script(0.5)
FAILING = SCRIPT.replace('output: "final"', 'fail: 9\n    error: outage')


@pytest.fixture
def env(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # a hint must not need one
    return os.environ.copy()


@pytest.fixture
def project(tmp_path, backend, monkeypatch):
    yield from make_project(tmp_path / "project", PROGRAM, SCRIPT, backend, monkeypatch)


def _hint(err: str, prefix: str) -> list[str]:
    lines = [line.partition(prefix)[2] for line in err.splitlines() if prefix in line]
    assert lines, err
    command = shlex.split(lines[-1])
    assert command[:2] == ["prose", "resume"], lines[-1]
    return command[1:]


def _as_printed(args: list[str], cwd, env) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args, "--json"], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=env)


def test_the_interrupt_hint_resumes_as_printed(project, backend, env):
    (project / "s.yaml").write_text(two_steps_script(0.5, final=3600))  # alive till signalled
    run = prose(project, "run", "p.prose", "--state", backend, *SCRIPTED,
                "--max-concurrency", "3", name="run")
    try:
        wait_for(lambda: len(starts(project)) >= 1, "a session's start", run)
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=120) == 130
    finally:
        stop(run)
    err = (project / "run.err").read_text()
    args = _hint(err, "interrupted; the run is consistent: ")
    assert args[2:] == []  # no flags: the run knows its provider, script and backend
    (project / "s.yaml").write_text(SCRIPT)
    done = _as_printed(args, project, env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outputs"] == {"o": "final"}
    with open_store(project, backend) as store:
        from openprose.engine.runner import run_settings

        how = run_settings(store.open_run(args[1]))
    assert how == {"provider": "scripted", "script": str((project / "s.yaml").resolve()),
                   "max_concurrency": 3, "backend": backend}


@pytest.mark.parametrize("backend", ["filesystem"])
def test_the_failure_hint_resumes_as_printed_from_elsewhere(project, backend, env, tmp_path):
    (project / "s.yaml").write_text(FAILING)
    failed = subprocess.run([*CLI, "run", "project/p.prose", "--project", "project",
                             *SCRIPTED[:3], "project/s.yaml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, env=env)
    assert failed.returncode == 1, failed.stderr
    args = _hint(failed.stderr, "resume with: ")
    assert args[2] == "--project"
    (project / "s.yaml").write_text(SCRIPT)  # the outage is over
    done = _as_printed(args, tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outputs"] == {"o": "final"}


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_input_hint_fails_loudly_pasted_unedited_and_resumes_filled_in(project, backend,
                                                                          env, tmp_path):
    (project / "p.prose").write_text(
        'let a = session "step A"\ninput go: "Proceed?"\noutput o = session "final {go}"\n')
    (project / "s.yaml").write_text("sessions:\n  - match: 'final (.+)'\n    output: 'went \\1'\n"
                                    "default_output: ok\n")
    paused = subprocess.run([*CLI, "run", "p.prose", "--state", backend, *SCRIPTED],
                            cwd=project, capture_output=True, text=True, timeout=120, env=env)
    assert paused.returncode == 3, paused.stderr
    line = [line for line in paused.stderr.splitlines() if "continue with: " in line][-1]
    hint = line.partition("continue with: ")[2]
    # Pasted as printed into a shell, the placeholder is an error, never a value; even with
    # a file of its name beside it.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "prose").symlink_to(Path(sys.executable).with_name("prose"))
    (project / "value").write_text("from a file")
    pasted = subprocess.run(["bash", "-c", hint], cwd=project, capture_output=True, text=True,
                            timeout=120, env={**env, "PATH": f"{bin_dir}:{env['PATH']}"})
    assert pasted.returncode != 0 and "syntax error" in pasted.stderr, pasted
    args = _hint(paused.stderr, "continue with: ")
    with open_store(project, backend) as store:
        run = store.open_run(args[1])
        assert run.status == "interrupted" and "go" not in {b.name for b in run.bindings()}
    assert args[-2:] == ["--input", "go=<value>"]
    done = _as_printed([*args[:-1], "go=yes"], project, env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outputs"] == {"o": "went yes"}


@pytest.mark.parametrize("backend", ["filesystem"])
@pytest.mark.parametrize("value", ["…", "...", " … "])
def test_a_placeholder_as_an_input_value_is_refused(project, backend, env, value):
    (project / "p.prose").write_text('input go: "Proceed?"\noutput o = session "final {go}"\n')
    refused = subprocess.run([*CLI, "run", "p.prose", *SCRIPTED, "--input", f"go={value}"],
                             cwd=project, capture_output=True, text=True, timeout=120, env=env)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"prose run: --input go={value}: {value!r} is a placeholder, not a value; put the "
        "value of 'go' in its place"]
    assert not (project / ".prose" / "runs").exists() or \
        not any((project / ".prose" / "runs").iterdir())
