"""`prose run` as users meet it: inputs, refusals in one line (never a traceback), --json."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from openprose.cli import cli
from openprose.engine import runner
from openprose.engine.errors import MissingInput
from openprose.engine.scripted import ScriptedProvider
from openprose.language import compile_or_raise
from openprose.state import open_store

PROSE = str(Path(sys.executable).with_name("prose"))

PROGRAM = ('input a: "the first thing"\n'
           'input b: "the second thing"\n'
           'input hint: "Optional: a hint to focus on"\n'
           'let inventory = session "Count the stock"\n'
           'input next: "Given {inventory}, what should happen next?"\n'
           'output r = session "Do {a} {b} {hint} {next}"\n')


@pytest.fixture
def project(tmp_path):
    (tmp_path / "p.prose").write_text(PROGRAM)
    (tmp_path / "s.yaml").write_text('sessions:\n  - match: "Count"\n    output: "7 apples"\n'
                                     '  - match: "Do (.*)"\n    output: "did \\\\1"\n')
    return tmp_path


def _invoke(tmp_path, *args):
    return CliRunner().invoke(cli, [*args, "--project", str(tmp_path)])


def _run(tmp_path, *args):
    return _invoke(tmp_path, "run", str(tmp_path / "p.prose"), "--provider", "scripted",
                   "--script", str(tmp_path / "s.yaml"), *args)


def _one_line_refusal(result, *needles):
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    for needle in needles:
        assert needle in lines[0]


def _runs(tmp_path):
    runs = tmp_path / ".prose" / "runs"
    return sorted(p.name for p in runs.iterdir()) if runs.is_dir() else []


def test_all_missing_inputs_are_named_at_once_and_no_run_is_left(project):
    result = _run(project)
    _one_line_refusal(result, "'a' (the first thing)", "'b' (the second thing)",
                      "--input a=<value>", "--input b=<value>")
    assert "hint" not in result.output  # optional: may be left out
    assert _runs(project) == []


def test_missing_inputs_with_json_print_a_json_result(project):
    result = _run(project, "--json")
    assert result.exit_code == 2
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert data["status"] == "missing_inputs" and data["run_id"] is None
    assert data["missing_inputs"] == [{"name": "a", "description": "the first thing"},
                                      {"name": "b", "description": "the second thing"}]
    assert _runs(project) == []


def test_a_refusal_with_json_prints_a_json_result(project):
    result = _run(project, "--input", "a=A", "--input", "b=B", "--input", "zz=1", "--json")
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["status"] == "refused" and "zz" in data["error"] and data["run_id"] is None


def test_execute_refuses_missing_inputs_before_a_run_exists(project):
    source = PROGRAM
    job = runner.Job(source=source, file="p.prose", program=compile_or_raise(source, "p.prose"),
                     project_root=project)
    with pytest.raises(MissingInput) as caught:
        asyncio.run(runner.execute(job, ScriptedProvider({"default_output": "x"})))
    assert [name for name, _ in caught.value.missing] == ["a", "b"]
    assert _runs(project) == []


def test_a_mid_program_input_pauses_the_run_then_resume_supplies_it(project):
    paused = _run(project, "--input", "a=A", "--input", "b=B")
    assert paused.exit_code == 3, paused.output
    run_id = _runs(project)[0]
    assert "Given 7 apples, what should happen next?" in paused.output
    hint = paused.output.partition("continue with: ")[2].splitlines()[0]
    assert hint.startswith(f"prose resume {run_id} ") and hint.endswith(" --input next=<value>")
    with open_store(project) as store:
        assert store.open_run(run_id).status == "interrupted"
    done = _invoke(project, "resume", run_id, "--input", "next=sell", "--provider",
                   "scripted", "--script", str(project / "s.yaml"), "--json")
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout.strip().splitlines()[-1])
    assert data["outputs"] == {"r": "did A B  sell"} and data["reused"] == 1


def test_paused_json_names_what_the_run_waits_for(project):
    result = _run(project, "--input", "a=A", "--input", "b=B", "--json")
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert data["status"] == "paused"
    assert data["waiting_for"] == {"input": "next",
                                   "prompt": "Given 7 apples, what should happen next?"}


def test_an_undeclared_input_is_refused(project):
    _one_line_refusal(_run(project, "--input", "a=A", "--input", "colour=red"),
                      "--input colour", "a, b, hint, next")
    assert _runs(project) == []


@pytest.mark.parametrize(("script", "needle"), [
    ("default_output: 5\n", "'default_output' must be a string"),
    ("latency: abc\n", "'latency' must be a number"),
    ("sessions: 5\n", "'sessions' must be a list"),
    ("default_output: ok\ncolour: red\n", "unknown key 'colour'"),
    ("sessions:\n  - match: x\n    outptu: y\n", "unknown key 'outptu' in sessions[0]"),
])
def test_a_bad_script_is_one_line_naming_the_key(project, script, needle):
    (project / "s.yaml").write_text(script)
    _one_line_refusal(_run(project, "--input", "a=A", "--input", "b=B"), "s.yaml", needle)


def test_a_non_utf8_program_is_refused_by_run_dry_run_and_resume(project):
    bad = project / "bad.prose"
    bad.write_bytes(b'let x = "ok"\noutput s = session "G\xff\xfe"\n')
    for extra in ((), ("--dry-run",)):
        _one_line_refusal(_invoke(project, "run", str(bad), *extra), "bad.prose:2:22",
                          "not UTF-8")
    (project / "ok.prose").write_text('output s = session "Go"\n')
    first = _invoke(project, "run", str(project / "ok.prose"), "--provider", "scripted",
                    "--script", str(project / "s.yaml"))
    run_id = _runs(project)[0]
    assert first.exit_code == 1  # no scripted output for "Go": the run fails, resumable
    _one_line_refusal(_invoke(project, "resume", run_id, "--program", str(bad)),
                      "bad.prose:2:22")
    _one_line_refusal(_invoke(project, "resume", run_id, "--program",
                              str(project / "gone.prose")), "gone.prose", "cannot read")


def test_project_problems_are_one_line(project):
    gone = project / "not-here"
    _one_line_refusal(CliRunner().invoke(cli, ["run", str(project / "p.prose"), "--project",
                                               str(gone)]), "no such directory")
    assert not gone.exists()
    (project / ".prose").write_text("")
    _one_line_refusal(_run(project, "--input", "a=A", "--input", "b=B"), ".prose is a file")


def test_a_bad_postgres_url_is_one_line(project):
    """One attempt, one line: not the pool's retries logged while it waits 10 s."""
    done = subprocess.run([PROSE, "run", "p.prose", "--provider", "scripted", "--script",
                           "s.yaml", "--input", "a=A", "--input", "b=B", "--state", "postgres"],
                          cwd=project, capture_output=True, text=True, timeout=120,
                          env={**os.environ,
                               "OPENPROSE_POSTGRES_URL": "postgresql://nobody@127.0.0.1:1/x"})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "cannot connect to PostgreSQL" in lines[0] and "127.0.0.1:1/x" in lines[0]


def test_stdin_closed_is_no_traceback(project):
    done = subprocess.run(["sh", "-c", f'"{PROSE}" run p.prose --provider scripted --script '
                                       's.yaml --input a=A --input b=B <&-'],
                          cwd=project, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and "paused at input 'next'" in done.stderr
    closed = subprocess.run(["sh", "-c", f'"{PROSE}" run - <&-'], cwd=project,
                            capture_output=True, text=True, timeout=120)
    assert closed.returncode == 2 and "Traceback" not in closed.stderr
    assert closed.stderr.strip() == "prose run: stdin is closed: there is no program to read " \
                                    "from '-'"


def test_json_result_for_compile_errors(project):
    (project / "bad.prose").write_text("session\n")
    result = _invoke(project, "run", str(project / "bad.prose"), "--json")
    assert result.exit_code == 2
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert data["status"] == "invalid" and data["run_id"] is None
    assert "bad.prose:1:8" in data["errors"][0] and "E005" in data["errors"][0]


def test_a_warning_is_reported_once_per_statement_not_per_iteration(project):
    (project / "w.prose").write_text('agent captain:\n  persist: true\n  prompt: "You lead"\n\n'
                                     'repeat 5:\n  session: captain\n    prompt: "next step"\n')
    (project / "ok.yaml").write_text("default_output: ok\n")
    result = _invoke(project, "run", str(project / "w.prose"), "--provider", "scripted",
                     "--script", str(project / "ok.yaml"), "--json")
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert data["status"] == "completed" and data["sessions"] == 5
    assert len(data["warnings"]) == 1 and data["warnings"][0].startswith("W011")


def test_json_result_for_an_interrupt(project):
    (project / "slow.prose").write_text('output s = session "Go"\n')
    (project / "slow.yaml").write_text("default_output: ok\nlatency: 60\n")
    proc = subprocess.Popen([PROSE, "run", "slow.prose", "--provider", "scripted", "--script",
                             "slow.yaml", "--json"], cwd=project, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        started = proc.stderr.readline()
        assert started.endswith("started\n"), started
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert json.loads(out) == {"run_id": started.split()[1], "status": "interrupted"}
