"""Resume after faults: a killed driver's sessions, reused values, join decisions, frames."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from tests.conftest import CORPUS, no_sleep
from tests.engine import killing

from openprose.engine import runner
from openprose.engine.interpreter import Options
from openprose.engine.scripted import ScriptedProvider
from openprose.engine.state_journal import Batcher
from openprose.language import compile_or_raise
from openprose.state import BindingRef, Completion, open_store
from openprose.state.store import Run

pytestmark = pytest.mark.usefixtures("postgres_env")


def _run(root: Path, source: str, provider, backend: str = "filesystem",
         run_id: str | None = None) -> runner.Outcome:
    if run_id is None:
        program = compile_or_raise(source, "p.prose")
        job = runner.Job(source=source, file="p.prose", program=program, project_root=root,
                         backend=backend)
    else:
        job = runner.resume_job(run_id, root, backend)
    job.options = Options(sleep=no_sleep)
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


class _BreaksOnceSteadyIsWritten(ScriptedProvider):
    """"Steady" answers once "Breaks" has started; "Breaks" fails once the commit of
    "Steady" is on disk: the same order whatever the speed."""

    def __init__(self, script, written: threading.Event, failed: threading.Event):
        super().__init__(script)
        self.written, self.failed = written, failed
        self.breaking = threading.Event()

    async def run_session(self, request, io):
        if "Steady" in request.prompt:
            assert await asyncio.to_thread(self.breaking.wait, 60)
        if "Breaks" in request.prompt:
            self.breaking.set()
            assert await asyncio.to_thread(self.written.wait, 60)
            try:
                return await super().run_session(request, io)
            finally:
                self.failed.set()
        return await super().run_session(request, io)


def test_a_commit_landing_after_a_fail_fast_cancel_is_not_run_again(tmp_path, backend,
                                                                     monkeypatch):
    program = ('parallel:\n  a = session "Steady"\n  b = session "Breaks"\n'
               'output o = session "After"\n  context: { a, b }\n')
    steady = {"match": "Steady", "output": "steady"}
    written, failed, cancelled = threading.Event(), threading.Event(), threading.Event()
    original, submit = Run.complete_sessions, Batcher.submit

    def slow(self, completions):
        """A disk that returns a commit already durable only once the fail-fast cancel has
        reached the session waiting for it."""
        result = original(self, completions)
        written.set()
        assert failed.wait(60)
        assert cancelled.wait(60)
        return result

    async def noting_cancel(self, item):
        try:
            return await submit(self, item)
        except asyncio.CancelledError:
            if isinstance(item, Completion):
                cancelled.set()
            raise

    monkeypatch.setattr(Run, "complete_sessions", slow)
    monkeypatch.setattr(Batcher, "submit", noting_cancel)
    first = _BreaksOnceSteadyIsWritten({"sessions": [steady, {"match": "Breaks"}]}, written,
                                       failed)
    failed_run = _run(tmp_path, program, first, backend)
    assert failed_run.status == "failed"
    monkeypatch.setattr(Run, "complete_sessions", original)
    fixed = ScriptedProvider({"sessions": [steady], "default_output": "fine"})
    outcome = _run(tmp_path, program, fixed, backend, failed_run.run_id)
    assert outcome.status == "completed", outcome.error
    assert _started(fixed) == ["0|1", "1"]  # the steady branch had committed


FIRST = ('parallel ("first"):\n  a = session "Alpha"\n  b = session "Beta"\n'
         '  c = session "Gamma"\noutput o = session "Report"\n  context: { a, b, c }\n')
FIRST_SCRIPT = {"sessions": [{"match": "Beta", "output": "beta", "latency": 0.01},
                             {"match": "Alpha", "output": "alpha", "latency": 0.05},
                             {"match": "Gamma", "output": "gamma", "latency": 2},
                             {"match": "Report.*", "output": "report: \\g<0>"}]}


def test_a_first_joins_winner_is_replayed_though_a_loser_committed_late(tmp_path, backend):
    done = _run(tmp_path, FIRST, ScriptedProvider(FIRST_SCRIPT), backend)
    assert done.status == "completed", done.error
    assert "beta" in done.outputs["o"] and "alpha" not in done.outputs["o"]
    with open_store(tmp_path, backend) as store:  # Alpha's commit, in flight when it lost
        run = store.open_run(done.run_id)
        [intent] = [e for e in store.backend.read_journal(run.id)
                    if e.key == "0|0" and e.kind == "intent"]
        grant = run.grant_session(BindingRef("a"), "let", 'a = session "Alpha"')
        run.complete_session(grant.token, "0|0", input_hash=intent.input_hash, value="alpha")
    again = ScriptedProvider(FIRST_SCRIPT)
    outcome = _run(tmp_path, FIRST, again, backend, done.run_id)
    assert outcome.status == "completed", outcome.error
    assert outcome.outputs == done.outputs
    assert _started(again) == []


ANY = ('parallel ("any", count: 2):\n  a = session "One"\n  b = session "Two"\n'
       '  c = session "Three"\n  d = session "Four"\n'
       'output o = session "Choose"\n  context: { a, b, c, d }\n')


def test_resuming_after_an_any_join_replays_its_winners(tmp_path, backend):
    script = {"sessions": [{"match": "One|Two", "output": "slow", "latency": 1},
                           {"match": "Three|Four", "output": "quick", "latency": 0.01},
                           {"match": "Choose.*", "output": "chose \\g<0>"}]}
    done = _run(tmp_path, ANY, ScriptedProvider(script), backend)
    assert done.status == "completed", done.error
    again = ScriptedProvider(script)
    outcome = _run(tmp_path, ANY, again, backend, done.run_id)
    assert outcome.status == "completed", outcome.error
    assert outcome.outputs == done.outputs and _started(again) == []


CORPUS_19 = CORPUS / "19-advanced-parallel.prose"


@pytest.mark.skipif(not CORPUS_19.exists(), reason="corpus not present")
def test_a_completed_run_of_corpus_19_resumes_unchanged(tmp_path):
    source = CORPUS_19.read_text(encoding="utf-8")
    script = {"default_output": "yes", "latency": 0.01}
    done = _run(tmp_path, source, ScriptedProvider(script))
    assert done.status == "completed", done.error
    again = ScriptedProvider(script)
    outcome = _run(tmp_path, source, again, "filesystem", done.run_id)
    assert outcome.status == "completed", outcome.error
    assert _started(again) == []


BLOCK = '''\
block work(topic):
  let x = session "Fast step {topic}"
  let y = session "Slow step"
    context: x
  output y
let r = do work("t")
output o = r
'''


def test_a_resumed_block_call_keeps_its_frame(tmp_path, backend):
    root = killing.project(tmp_path, BLOCK, SLOW.replace("Fast step", "Fast step t"))
    run_id = killing.kill_during(root, backend, "1>work.1")
    provider = _ReadsContext(yaml.safe_load(QUICK))
    outcome = _run(root, BLOCK, provider, backend, run_id)
    assert outcome.status == "completed", outcome.error
    assert _started(provider) == ["1>work.1"]
    assert outcome.outputs == {"o": "saw fast result"}
    with open_store(root, backend) as store:
        run = store.open_run(run_id)
        frames = run.frames()
        scoped = {b.name: b.execution_id for b in run.bindings() if b.execution_id}
    assert [(f.execution_id, f.status) for f in frames] == [(1, "completed")]
    assert scoped == {"topic": 1, "x": 1, "y": 1}


LIB = 'input t: "a topic"\nlet x = "init"\nx = session "Slow step"\noutput o = x\n'
CALLER = 'use "./lib.prose" as lib\nlet r = lib(t: "tides")\noutput o = r.o\n'


@pytest.mark.parametrize("backend", ["filesystem", "sqlite"])
def test_a_killed_drivers_session_in_an_imported_program_does_not_block_resume(tmp_path,
                                                                               backend):
    root = killing.project(tmp_path, CALLER, SLOW)
    (root / "lib.prose").write_text(LIB)
    (root / "q.yaml").write_text(QUICK)
    run_id = killing.kill_during(root, backend, "1>lib.2")
    proc = killing.start(root, killing.resume_args(run_id, backend, "q.yaml"),
                         root / "err1.txt")
    result = killing.finish(proc)
    assert result["status"] == "completed", result["error"]
    assert result["outputs"] == {"o": "slow result"}


def test_an_input_given_up_front_survives_a_kill_before_its_statement(tmp_path, backend):
    # `prose run --input later=...` gives a value for an input the program reaches only after
    # a session; killed during that session, the resumed run still has it (before: it paused
    # "waiting for input 'later'")
    program = ('let x = session "Slow step"\ninput later: "Anything to add?"\n'
               'output o = "{x} + {later}"\n')
    root = killing.project(tmp_path, program, SLOW)
    (root / "q.yaml").write_text(QUICK)
    proc = killing.start(root, [*killing.run_args(backend), "--input", "later=given early"],
                         root / "err0.txt")
    try:
        killing.wait_for_call(root / "calls.jsonl", "0")
    finally:
        killing.kill(proc)
    run_id = killing.run_id_of(root / "err0.txt")
    proc = killing.start(root, killing.resume_args(run_id, backend, "q.yaml"),
                         root / "err1.txt")
    result = killing.finish(proc)
    assert result["status"] == "completed", result["error"]
    assert result["outputs"] == {"o": "slow result + given early"}
    assert _value(root, backend, run_id, "later") == "given early"
