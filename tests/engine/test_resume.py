"""Resume on real state: finished sessions and verdicts reused, stable keys, edited programs."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from tests.conftest import no_sleep

from openprose.engine import runner
from openprose.engine.interpreter import Options
from openprose.engine.scripted import ScriptedProvider
from openprose.language import compile_or_raise
from openprose.state import open_store

pytestmark = pytest.mark.usefixtures("postgres_env")


def _start(root: Path, source: str, script: dict, backend: str, run_id: str | None = None,
           inputs: dict | None = None, provider: ScriptedProvider | None = None):
    program = compile_or_raise(source, "p.prose")
    job = runner.Job(source=source, file="p.prose", program=program, project_root=root,
                     backend=backend, inputs=inputs or {}, run_id=run_id,
                     options=Options(sleep=no_sleep))
    provider = provider or ScriptedProvider(script)
    return asyncio.run(runner.execute(job, provider)), provider


def _resume(root: Path, run_id: str, script: dict, backend: str, program_file=None):
    job = runner.resume_job(run_id, root, backend, program_file)
    job.options = Options(sleep=no_sleep)
    provider = ScriptedProvider(script)
    return asyncio.run(runner.execute(job, provider)), provider


def _started(provider) -> list[str]:
    return [c.key for c in provider.calls if c.phase == "start"]


PROGRAM = '''\
input topic: "t"
let a = session "first {topic}"
if **worth it**:
  let b = session "second"
    context: a
output c = session "third"
  context: b
'''
GOOD = {"sessions": [{"match": r"(first|second|third)", "output": r"\1 done"}],
        "conditions": [{"match": "worth", "verdicts": [True]}]}
BROKEN = {"sessions": [{"match": "third", "fail": 9, "error": "outage"}, *GOOD["sessions"]],
          "conditions": GOOD["conditions"]}


def test_failed_run_resumes_without_rerunning_finished_steps(tmp_path, backend):
    first, _ = _start(tmp_path, PROGRAM, BROKEN, backend, inputs={"topic": "X"})
    assert (first.status, first.exit_code) == ("failed", 1)
    assert "p.prose:6:1" in first.error and "outage" in first.error
    second, p2 = _resume(tmp_path, first.run_id, GOOD, backend)
    assert second.status == "completed" and second.outputs == {"c": "third done"}
    assert _started(p2) == ["3"]  # only the failed session ran again
    assert [c.kind for c in p2.calls].count("judge") == 0  # the verdict was reused
    assert second.reused == 2
    with open_store(tmp_path, backend) as store:
        run = store.open_run(first.run_id)
        assert {b.name: b.value for b in run.bindings()} == {
            "topic": "X", "a": "first done", "b": "second done", "c": "third done"}
        assert run.status == "completed"


PARALLEL = '''\
parallel:
  a = session "branch A"
  b = session "branch B"
  c = session "branch C"
output all = session "join"
  context: { a, b, c }
'''


class _FailsOnceOthersCommitted(ScriptedProvider):
    """"branch A" answers (and fails) only once the sessions ``keys`` are committed."""

    def __init__(self, script: dict, keys: set[str]) -> None:
        super().__init__(script)
        self.waiting, self.committed = set(keys), threading.Event()

    def record_commit(self, key: str) -> None:
        super().record_commit(key)
        self.waiting.discard(key)
        if not self.waiting:
            self.committed.set()

    async def run_session(self, request, io):
        if "branch A" in request.prompt:
            assert await asyncio.to_thread(self.committed.wait, 60)
        return await super().run_session(request, io)


def test_parallel_branches_keep_their_own_results_when_order_changes(tmp_path, backend):
    # First attempt: C finishes first, B second, A fails once both are committed.
    script1 = {"sessions": [
        {"match": "branch A", "fail": 9},
        {"match": "branch B", "output": "result B", "latency": 0.05},
        {"match": "branch C", "output": "result C", "latency": 0.0},
        {"match": "join", "output": "joined"}]}
    first, _ = _start(tmp_path, PARALLEL, script1, backend,
                      provider=_FailsOnceOthersCommitted(script1, {"0|1", "0|2"}))
    assert first.status == "failed"
    # Resume: A is now the fastest.
    script2 = {"sessions": [
        {"match": "branch A", "output": "result A", "latency": 0.0},
        {"match": "join.*", "output": r"\g<0>"}]}
    second, p2 = _resume(tmp_path, first.run_id, script2, backend)
    assert second.status == "completed"
    assert _started(p2) == ["0|0", "1"]
    joined = second.outputs["all"]
    assert "## a\nresult A" in joined and "## b\nresult B" in joined
    assert "## c\nresult C" in joined


def test_resume_against_an_edited_program_refuses_where_it_differs(tmp_path):
    first, _ = _start(tmp_path, PROGRAM, BROKEN, "filesystem", inputs={"topic": "X"})
    edited = tmp_path / "edited.prose"
    edited.write_text(PROGRAM.replace("second", "another second"))
    second, p2 = _resume(tmp_path, first.run_id, GOOD, "filesystem", str(edited))
    assert second.status == "failed" and second.exit_code == 2
    assert "edited.prose:4:11" in second.error and "no longer matches" in second.error
    assert _started(p2) == []


def test_interrupted_run_is_consistent_and_resumable(tmp_path):
    source = 'let a = session "quick"\nlet b = session "slow"\noutput c = session "end"\n'
    script = {"default_output": "ok", "sessions": [{"match": "slow", "latency": 5,
                                                    "output": "s"}]}
    program = compile_or_raise(source, "p.prose")
    job = runner.Job(source=source, file="p.prose", program=program, project_root=tmp_path,
                     options=Options(sleep=no_sleep))

    slow = asyncio.Event()

    class Signals(ScriptedProvider):
        """Says when the slow session has started (the quick one is committed by then)."""

        async def run_session(self, request, io):
            if "slow" in request.prompt:
                slow.set()
            return await super().run_session(request, io)

    async def interrupt():
        task = asyncio.create_task(runner.execute(job, Signals(script)))
        await slow.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupt())
    with open_store(tmp_path) as store:
        assert store.open_run(job.run_id).status == "interrupted"
    done, provider = _resume(tmp_path, job.run_id, {"default_output": "ok"}, "filesystem")
    assert done.outputs == {"c": "ok"} and _started(provider) == ["1", "2"]


def test_objects_older_than_the_run_are_frozen_only_while_it_runs(tmp_path):
    import gc

    seen: list[int] = []
    program = compile_or_raise(PROGRAM, "p.prose")
    job = runner.Job(source=PROGRAM, file="p.prose", program=program, project_root=tmp_path,
                     backend="filesystem", inputs={"topic": "X"},
                     options=Options(sleep=no_sleep))
    outcome = asyncio.run(runner.execute(job, ScriptedProvider(BROKEN),
                                         lambda event: seen.append(gc.get_freeze_count())))
    assert outcome.status == "failed"  # unfrozen on failure too
    assert min(seen) > 0
    assert gc.get_freeze_count() == 0
