"""Block recursion reaches its max_depth through any nesting of constructs, and stops there
with RecursionLimitExceeded (never Python's own recursion limit)."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

from openprose.cli import cli
from openprose.engine import runner
from openprose.engine.errors import RecursionLimitExceeded
from openprose.engine.scripted import ScriptedProvider
from openprose.language import compile as compile_program
from openprose.language.validator import MAX_DEPTH_SUPPORTED

NESTINGS = {
    "if-else": "  if **small enough**:\n    session \"leaf\"\n  else:\n    do f(n)\n",
    "for": "  for part in [n]:\n    do f(part)\n",
    "try-finally": "  try:\n    do f(n)\n  finally:\n    session \"cleanup\"\n",
    "try-catch-rethrow": "  try:\n    do f(n)\n  catch as err:\n    throw\n",
    "parallel": "  parallel:\n    do f(n)\n",
    "all-of-them": ("  if **small enough**:\n    session \"leaf\"\n  else:\n"
                    "    for part in [n]:\n      try:\n        parallel:\n          do f(part)\n"
                    "      catch as err:\n        throw\n"),
}


def _program(body: str, depth: int | None = None) -> str:
    limit = f" (max_depth: {depth})" if depth is not None else ""
    return f"block f(n){limit}:\n{body}\ndo f(\"x\")\n"


@pytest.mark.parametrize("nesting", sorted(NESTINGS))
def test_default_max_depth_is_reached_through_nesting(harness, nesting):
    h = harness({"default_verdict": False})
    with pytest.raises(RecursionLimitExceeded, match="block 'f' exceeded max_depth 100"):
        h.run(_program(NESTINGS[nesting]))
    assert max(depth for _, block, depth in h.journal.frames if block == "f") == 100


def test_the_engines_own_limit_is_reachable(harness):
    h = harness({"default_verdict": False})
    with pytest.raises(RecursionLimitExceeded, match=f"max_depth {MAX_DEPTH_SUPPORTED}"):
        h.run(_program(NESTINGS["all-of-them"], MAX_DEPTH_SUPPORTED))


def test_max_depth_above_the_engines_limit_is_a_compile_error():
    result = compile_program(_program(NESTINGS["for"], MAX_DEPTH_SUPPORTED + 1), "deep.prose")
    assert not result.ok
    [error] = result.errors
    assert f"{MAX_DEPTH_SUPPORTED:,}" in error.message and error.span.line == 1


def test_prose_run_reports_the_limit(tmp_path):
    prog = tmp_path / "deep.prose"
    prog.write_text(_program(NESTINGS["all-of-them"]))
    script = tmp_path / "s.yaml"
    script.write_text("default_output: ok\n")
    result = CliRunner().invoke(cli, ["run", str(prog), "--provider", "scripted", "--script",
                                      str(script), "--json", "--project", str(tmp_path)])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert data["status"] == "failed"
    assert "RecursionLimitExceeded: block 'f' exceeded max_depth 100" in data["error"]
    assert "Traceback" not in result.output


def test_runner_execute_reports_the_limit(tmp_path):
    source = _program(NESTINGS["try-finally"], 150)
    program = compile_program(source, "deep.prose").program
    job = runner.Job(source=source, file="deep.prose", program=program, project_root=tmp_path,
                     backend="sqlite")
    outcome = asyncio.run(runner.execute(job, ScriptedProvider({"default_output": "ok"})))
    assert outcome.status == "failed"
    assert "RecursionLimitExceeded: block 'f' exceeded max_depth 150" in outcome.error
