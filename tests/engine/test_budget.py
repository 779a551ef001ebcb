"""--max-tokens / --max-cost: once reached, no new session starts; the run stops resumable
with a clear status, keeps its budget on resume, and a resume can raise it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROSE = str(Path(sys.executable).with_name("prose"))
PROGRAM = '''\
let a = session "one two three four five"
let b = session "six seven eight nine ten"
output c = session "eleven twelve"
'''
# The scripted provider counts a session's prompt words in and its output words out.
SCRIPT = "default_output: 'w w w w w'\ncall_log: calls.jsonl\n"


def _prose(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROSE, *args], cwd=root, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)


def _sessions(root: Path) -> list[str]:
    lines = (root / "calls.jsonl").read_text().splitlines()
    return [json.loads(line)["key"] for line in lines if '"phase": "start"' in line]


def test_a_run_stops_at_its_token_budget_and_resumes_with_a_higher_one(tmp_path):
    (tmp_path / "p.prose").write_text(PROGRAM)
    (tmp_path / "s.yaml").write_text(SCRIPT)
    done = _prose(tmp_path, "run", "p.prose", "--provider", "scripted", "--script", "s.yaml",
                  "--max-tokens", "12")
    assert done.returncode == 4, done.stderr
    assert "stopped: budget reached: the run has used 20 tokens, its --max-tokens is 12; " \
           "no new session was started" in done.stderr
    assert "--max-tokens N" in done.stderr
    assert _sessions(tmp_path) == ["0", "1"]  # 10 tokens after the first: the second ran
    run_id = done.stderr.split("run ")[1].split()[0]
    shown = json.loads(_prose(tmp_path, "show", run_id, "--json").stdout)
    assert shown["status"] == "interrupted" and "budget reached" in shown["error"]

    again = _prose(tmp_path, "resume", run_id, "--json")  # the recorded budget still holds
    assert again.returncode == 4 and json.loads(again.stdout)["status"] == "over_budget"
    assert _sessions(tmp_path) == ["0", "1"]

    raised = _prose(tmp_path, "resume", run_id, "--max-tokens", "100", "--json")
    assert raised.returncode == 0, raised.stderr
    outcome = json.loads(raised.stdout)
    assert outcome["status"] == "completed" and outcome["reused"] == 2
    assert _sessions(tmp_path) == ["0", "1", "2"]


def test_the_budget_may_come_from_the_settings(tmp_path):
    (tmp_path / "p.prose").write_text(PROGRAM)
    (tmp_path / "s.yaml").write_text(SCRIPT)
    (tmp_path / ".prose").mkdir()
    (tmp_path / ".prose" / ".env").write_text("OPENPROSE_MAX_TOKENS=1\n")
    done = _prose(tmp_path, "run", "p.prose", "--provider", "scripted", "--script", "s.yaml",
                  "--json")
    outcome = json.loads(done.stdout)
    assert outcome["status"] == "over_budget" and outcome["sessions"] == 1


def test_the_cost_limit_counts_what_the_run_spent_before():
    from openprose.engine.interpreter import RunBudget
    from openprose.engine.provider import Usage

    budget = RunBudget(max_cost=0.05, spent=Usage(10, 10, 0.04))
    assert budget.exceeded(Usage(1, 1, 0.009)) is None
    assert budget.exceeded(Usage(1, 1, 0.01)) == \
        "the run has cost $0.0500, its --max-cost is $0.0500"


def test_a_resumed_budget_counts_the_imported_programs_sessions(tmp_path):
    """What a run spent before includes the sessions of the programs it imported (as `prose
    runs` and `prose show` count them): before, a resume counted the run's own only."""
    import asyncio

    from openprose.engine import ScriptedProvider, runner
    from openprose.engine.interpreter import RunBudget
    from openprose.language import compile_or_raise

    (tmp_path / "lib.prose").write_text(
        'input text: "t"\nlet a = session "Condense {text}"\noutput b = session "Title {a}"\n')
    source = ('use "./lib.prose" as lib\nlet r = lib(text: "some words")\n'
              'output last = session "Final step"\n')
    script = {"default_output": "ok", "sessions": [{"match": "Final", "fail": 9}]}
    program = compile_or_raise(source, str(tmp_path / "p.prose"))
    job = runner.Job(source=source, file=str(tmp_path / "p.prose"), program=program,
                     project_root=tmp_path, imports=runner.load_imports(
                         program, str(tmp_path / "p.prose"), tmp_path))
    first = asyncio.run(runner.execute(job, ScriptedProvider(script)))
    assert first.status == "failed" and first.sessions == 2
    again = runner.resume_job(first.run_id, tmp_path, None)
    again.budget = RunBudget(max_tokens=first.tokens)  # all spent already, in the import
    resumed = asyncio.run(runner.execute(again, ScriptedProvider({"default_output": "ok"})))
    assert resumed.status == "over_budget", resumed
