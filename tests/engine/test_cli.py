"""`prose run` / `prose resume` from the command line: output, JSON, exit codes, messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from openprose.cli import cli
from openprose.state import BindingRef, open_store

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _invoke(args, tmp_path, env=None):
    return CliRunner().invoke(cli, [*args, "--project", str(tmp_path)], env=env)


def test_run_bundled_example_json(tmp_path):
    result = _invoke(["run", str(EXAMPLES / "hello.prose"), "--provider", "scripted",
                      "--script", str(EXAMPLES / "hello.script.yaml"), "--input", "topic=tides",
                      "--json"], tmp_path)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert data["status"] == "completed" and data["sessions"] == 2
    assert data["outputs"]["summary"].startswith("- A twelve-hour rhythm")
    assert set(data) >= {"run_id", "status", "outputs", "sessions", "tokens"}


def test_input_from_file_and_missing_input_message(tmp_path):
    (tmp_path / "topic.txt").write_text("volcanoes")
    ok = _invoke(["run", str(EXAMPLES / "hello.prose"), "--provider", "scripted", "--script",
                  str(EXAMPLES / "hello.script.yaml"), "--input",
                  f"topic=@{tmp_path / 'topic.txt'}", "--json"], tmp_path)
    assert ok.exit_code == 0
    run_id = json.loads(ok.stdout.strip())["run_id"]
    with open_store(tmp_path) as store:
        research = store.open_run(run_id).read_binding(BindingRef("research")).value
    assert research.startswith("Facts about volcanoes")
    missing = _invoke(["run", str(EXAMPLES / "hello.prose"), "--provider", "scripted",
                       "--script", str(EXAMPLES / "hello.script.yaml")], tmp_path)
    assert missing.exit_code == 2
    assert "missing input 'topic'" in missing.output and "--input topic=" in missing.output


def test_failed_program_exits_1_with_location_then_resume(tmp_path):
    prog = tmp_path / "f.prose"
    prog.write_text('let a = session "one"\nthrow "stop"\n')
    script = tmp_path / "s.yaml"
    script.write_text("default_output: ok\n")
    failed = _invoke(["run", str(prog), "--provider", "scripted", "--script", str(script)],
                     tmp_path)
    assert failed.exit_code == 1
    assert "f.prose:2:1" in failed.output and "stop" in failed.output
    run_id = failed.output.split("run ", 1)[1].split()[0]
    again = _invoke(["resume", run_id, "--provider", "scripted", "--script", str(script),
                     "--json"], tmp_path)
    assert again.exit_code == 1
    assert json.loads(again.stdout.strip().splitlines()[-1])["reused"] == 1


def test_compile_errors_exit_2_with_diagnostics(tmp_path):
    prog = tmp_path / "bad.prose"
    prog.write_text("session\n")
    result = _invoke(["run", str(prog), "--dry-run"], tmp_path)
    assert result.exit_code == 2 and "bad.prose:1:8: E005" in result.output


def test_no_api_key_explains_the_alternatives(tmp_path):
    result = _invoke(["run", str(EXAMPLES / "hello.prose"), "--input", "topic=x"], tmp_path,
                     env={"ANTHROPIC_API_KEY": ""})
    assert result.exit_code == 2
    assert "ANTHROPIC_API_KEY" in result.output and "--provider scripted" in result.output
    assert "--dry-run" in result.output


def test_dry_run_reports_plan_without_a_model(tmp_path):
    prog = tmp_path / "d.prose"
    prog.write_text('loop until **done** (max: 5):\n  session "work"\n')
    result = _invoke(["run", str(prog), "--dry-run", "--json"], tmp_path)
    assert result.exit_code == 0
    plan = json.loads(result.stdout)
    assert (plan["sessions"], plan["judgments"]) == (5, 5)
    assert not (tmp_path / ".prose").exists()


def test_resume_unknown_run_is_a_usage_error(tmp_path):
    result = _invoke(["resume", "20990101-000000-abcdef", "--provider", "scripted",
                      "--script", str(EXAMPLES / "hello.script.yaml")], tmp_path)
    assert result.exit_code == 2 and "cannot resume" in result.output


def test_mid_program_input_pauses_then_resume_supplies_it(tmp_path):
    prog = tmp_path / "m.prose"
    prog.write_text('let a = session "first"\ninput go: "Proceed?"\noutput b = session "then {go}"\n')
    script = tmp_path / "s.yaml"
    script.write_text("sessions:\n  - match: 'then (.+)'\n    output: 'went \\1'\n"
                      "default_output: ok\n")
    paused = _invoke(["run", str(prog), "--provider", "scripted", "--script", str(script)],
                     tmp_path)
    assert paused.exit_code == 3 and "paused at input 'go' (Proceed?)" in paused.output
    run_id = paused.output.split("run ", 1)[1].split()[0]
    done = _invoke(["resume", run_id, "--input", "go=yes", "--provider", "scripted",
                    "--script", str(script), "--json"], tmp_path)
    data = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.exit_code == 0 and data["outputs"] == {"b": "went yes"}
    assert data["reused"] == 1


def test_a_resume_without_a_usable_provider_names_resume(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    prog = tmp_path / "m.prose"
    prog.write_text('let a = session "first"\ninput go: "Proceed?"\n'
                    'output b = session "then {go}"\n')
    script = tmp_path / "s.yaml"
    script.write_text("default_output: ok\n")
    paused = _invoke(["run", str(prog), "--provider", "scripted", "--script", str(script)],
                     tmp_path)
    run_id = paused.output.split("run ", 1)[1].split()[0]
    refused = _invoke(["resume", run_id, "--provider", "anthropic", "--input", "go=yes"],
                      tmp_path)
    assert refused.exit_code == 2 and "prose resume: " in refused.output
    assert "prose run: " not in refused.output


def test_a_local_run_loads_neither_httpx_nor_rich(tmp_path):
    # every `prose run` and `prose resume` pays its imports at start: httpx comes only with
    # a fetched import or skill, rich only with the live display on a terminal
    (tmp_path / "p.prose").write_text('output o = session "hi"\n')
    (tmp_path / "s.yaml").write_text("default_output: ok\n")
    code = ("import sys\nfrom openprose.cli import main\ntry:\n    main()\nfinally:\n"
            "    print('loaded', [m for m in ('httpx', 'rich') if m in sys.modules])")
    for args in (["--json"], []):
        done = subprocess.run([sys.executable, "-c", code, "run", "p.prose", "--provider",
                               "scripted", "--script", "s.yaml", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == "loaded []"
