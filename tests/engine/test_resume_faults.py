"""Resume after faults: a killed driver's sessions, reused values, join decisions, frames."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from tests.engine import killing

from openprose.engine import runner
from openprose.engine.interpreter import Options
from openprose.engine.scripted import ScriptedProvider
from openprose.language import compile_or_raise
from openprose.state import BindingRef, open_store

BACKENDS = ["filesystem", "sqlite", pytest.param(
    "postgres", marks=[pytest.mark.postgres, pytest.mark.skipif(
        not killing.PG_URL, reason="needs OPENPROSE_TEST_POSTGRES_URL (scripts/pg-up)")])]


@pytest.fixture(autouse=True)
def _postgres_env(monkeypatch):
    if killing.PG_URL:
        monkeypatch.setenv("OPENPROSE_POSTGRES_URL", killing.PG_URL)


async def _no_sleep(seconds: float) -> None:
    return None


def _run(root: Path, source: str, provider, backend: str = "filesystem",
         run_id: str | None = None) -> runner.Outcome:
    if run_id is None:
        program = compile_or_raise(source, "p.prose")
        job = runner.Job(source=source, file="p.prose", program=program, project_root=root,
                         backend=backend)
    else:
        job = runner.resume_job(run_id, root, backend)
    job.options = Options(sleep=_no_sleep)
    return asyncio.run(runner.execute(job, provider))


def _started(provider: ScriptedProvider) -> list[str]:
    return [c.key for c in provider.calls if c.kind == "session" and c.phase == "start"]


def _value(root: Path, backend: str, run_id: str, name: str, eid: int | None = None) -> str:
    with open_store(root, backend) as store:
        return store.open_run(run_id).read_binding(BindingRef(name, eid)).value


SLOW = '''\
call_log: calls.jsonl
sessions:
  - match: "Slow step"
    output: "slow result"
    latency: 60
  - match: "Fast step"
    output: "fast result"
'''
QUICK = '''\
call_log: calls.jsonl
sessions:
  - match: "Slow step"
    output: "slow result"
  - match: "Fast step"
    output: "fast result"
'''


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_killed_drivers_session_does_not_block_resume(tmp_path, backend):
    program = 'let x = "init"\nx = session "Slow step"\noutput o = x\n'
    root = killing.project(tmp_path, program, SLOW)
    (root / "q.yaml").write_text(QUICK)
    run_id = killing.kill_during(root, backend, "1")
    for attempt in range(2):  # every resume works, not just the first
        proc = killing.start(root, killing.resume_args(run_id, backend, "q.yaml"),
                             root / f"err{attempt + 1}.txt")
        result = killing.finish(proc)
        assert result["status"] == "completed", result["error"]
        assert result["outputs"] == {"o": "slow result"}
    assert _value(root, backend, run_id, "x") == "slow result"


class _ReadsContext(ScriptedProvider):
    """A model that reads its context through its session capability, as a tool would."""

    async def run_session(self, request, io):
        result = await super().run_session(request, io)
        if "Slow step" in request.prompt:
            return replace(result, output="saw " + io.read_context("x"))
        return result


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reused_sessions_value_is_what_every_reader_sees(tmp_path, backend):
    program = ('let x = "init"\nx = session "Fast step"\nlet y = session "Slow step"\n'
               '  context: x\noutput o = y\n')
    root = killing.project(tmp_path, program, SLOW)
    run_id = killing.kill_during(root, backend, "2")
    provider = _ReadsContext(yaml.safe_load(QUICK))
    outcome = _run(root, program, provider, backend, run_id)
    assert outcome.status == "completed", outcome.error
    assert _started(provider) == ["2"]
    assert outcome.outputs == {"o": "saw fast result"}
    assert _value(root, backend, run_id, "x") == "fast result"
