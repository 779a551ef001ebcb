"""The corpus programs run to completion on the scripted provider with filesystem state, or
fail only with the error their text asks for (a ``throw``, ``resume:`` before any memory)."""

from __future__ import annotations

import asyncio

import pytest
from tests.conftest import CORPUS

from openprose.engine import runner
from openprose.engine.interpreter import Options
from openprose.engine.scripted import ScriptedProvider
from openprose.language import compile_or_raise
from openprose.language.analysis import analyze
from openprose.mcp_server.results import run_outputs
from openprose.state import open_store

FILES = sorted(CORPUS.glob("*.prose")) + sorted(CORPUS.glob("roadmap/*.prose"))
INTENDED = {
    "22-error-handling.prose": "22-error-handling.prose:51:1: ThrownError: Validation failed",
    "48-habit-miner.prose": "48-habit-miner.prose:252:22: MemoryMissing: E018",
}
# Conditions: false on the first judgment, true on the next — every `if` takes its else,
# every `until` loop runs once, every `while` loop stops at once.
SCRIPT = {"default_output": "yes\n- first finding\n- second finding",
          "conditions": [{"match": ".", "verdicts": [False, True]}]}


async def _no_sleep(seconds: float) -> None:
    return None


@pytest.mark.skipif(not FILES, reason="corpus not present")
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_corpus_program_runs(path, tmp_path):
    source = path.read_text(encoding="utf-8")
    program = compile_or_raise(source, str(path))
    job = runner.Job(
        source=source, file=str(path), program=program, project_root=tmp_path,
        inputs={decl.name: f"sample {decl.name}" for decl in program.inputs},
        imports=runner.load_imports(program, str(path), tmp_path),
        options=Options(sleep=_no_sleep, loop_limit=50))
    outcome = asyncio.run(runner.execute(job, ScriptedProvider(SCRIPT)))
    if path.name in INTENDED:
        assert outcome.status == "failed" and INTENDED[path.name] in outcome.error
        return
    assert outcome.status == "completed", outcome.error
    assert outcome.sessions > 0
    declared = {s.name for s in program.body if type(s).__name__ == "Output" and s.name}
    assert declared <= set(outcome.outputs)
    with open_store(tmp_path) as store:
        run = store.open_run(outcome.run_id)
        names = {b.name for b in run.bindings()}
        # guided and delegated runs report by this rule: prose run --json says the same
        reported = [o.name for o in run_outputs(run, analyze(program, source))]
    assert declared <= names
    assert sorted(reported) == sorted(outcome.outputs)
