"""Guided runs at the engine level: the host provider's pending items, answered by a scripted
host, give the same run as ``prose run`` on the scripted provider."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from tests.conftest import CORPUS
from tests.mcp_server.guided_host import (
    CASES,
    answer_items,
    bindings_of,
    call_counts,
    corpus_job,
    host_loop,
    instant,
    no_sleep,
    scripted,
)

from openprose import state
from openprose.engine import ScriptedProvider, runner
from openprose.engine.briefs import attempt_note
from openprose.engine.interpreter import Options
from openprose.language import compile_or_raise
from openprose.mcp_server.guided import HostProvider, ItemRefused, SessionItem


async def _guided(job: runner.Job, script: ScriptedProvider, reverse: bool = False):
    host = HostProvider()
    run = asyncio.ensure_future(runner.execute(job, host, host.observe))
    await host_loop(host, script, run, reverse)
    return await run


@pytest.mark.skipif(not CORPUS.exists(), reason="corpus not present")
@pytest.mark.parametrize("name", sorted(CASES))
def test_guided_equals_prose_run(name, tmp_path):
    path = CORPUS / name
    reference = scripted(CASES[name])
    expected = asyncio.run(runner.execute(corpus_job(path, tmp_path / "a"), reference))
    host_script = scripted(instant(CASES[name]))
    got = asyncio.run(_guided(corpus_job(path, tmp_path / "b"), host_script))
    assert (got.status, got.error and got.error.split(": ", 1)[-1]) == (
        expected.status, expected.error and expected.error.split(": ", 1)[-1])
    assert got.outputs == expected.outputs
    assert (got.sessions, got.reused) == (expected.sessions, expected.reused)
    assert bindings_of(tmp_path / "b", got.run_id) == bindings_of(tmp_path / "a", expected.run_id)
    assert call_counts(host_script) == call_counts(reference)


PARALLEL = """\
parallel:
  a = session "Alpha"
  b = session "Beta"
  c = session "Gamma"
output joined = session "Join"
  context: { a, b, c }
"""


def _inline(source: str, root: Path, **options) -> runner.Job:
    return runner.Job(source=source, file="p.prose", program=compile_or_raise(source, "p.prose"),
                      project_root=root, options=Options(sleep=no_sleep, **options))


def test_parallel_items_pending_together_and_completed_in_reverse(tmp_path):
    async def main():
        host = HostProvider()
        run = asyncio.ensure_future(runner.execute(_inline(PARALLEL, tmp_path), host,
                                                   host.observe))
        items = await host.wait_for_items(60)
        assert sorted(i.request.binding for i in items) == ["a", "b", "c"]
        for item in sorted(items, key=lambda i: i.request.binding, reverse=True):
            written = await host.complete_session(item.token, f"value of {item.request.binding}")
            assert written.binding == item.request.binding and written.size > 0
            assert "value of" not in repr(written)  # the confirmation never holds the value
        (join,) = await host.wait_for_items(60)
        assert [(c.name, c.size) for c in join.brief.context] == [("a", 10), ("b", 10),
                                                                    ("c", 10)]
        await host.complete_session(join.token, "all three")
        return await run

    outcome = asyncio.run(main())
    assert outcome.status == "completed" and outcome.outputs == {"joined": "all three"}
    assert bindings_of(tmp_path, outcome.run_id)[("c", None)] == "value of c"


def test_items_whose_intent_is_still_being_written_are_listed_together(tmp_path,
                                                                       monkeypatch):
    """While one session is in flight the engine records the next ones' intent on a worker
    thread (backends whose writes wait: SQLite, PostgreSQL); a listing waits for those writes,
    however slow the disk, rather than returning the parallel block's branches one by one."""
    source = 'let a = session "First"\nparallel:\n  b = session "Second"\n' \
             '  c = session "Third"\n'
    start_sessions = state.Run.start_sessions

    def slow_off_the_loop(self, starts):
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.3)
        return start_sessions(self, starts)

    monkeypatch.setattr(state.Run, "start_sessions", slow_off_the_loop)

    async def main():
        host = HostProvider()
        job = _inline(source, tmp_path)
        job.backend = "sqlite"
        run = asyncio.ensure_future(runner.execute(job, host, host.observe))
        (first,) = await host.wait_for_items(60)
        await host.complete_session(first.token, "A")
        items = await host.wait_for_items(60)
        listed = sorted(item.request.binding for item in items)
        while not run.done():
            for item in items:
                await host.complete_session(item.token, item.request.binding.upper())
            items = await host.wait_for_items(0.5)
        return listed, await run

    listed, outcome = asyncio.run(main())
    assert listed == ["b", "c"] and outcome.status == "completed"


def test_concurrency_caps_pending_items(tmp_path):
    source = 'let xs = ["1", "2", "3", "4", "5"]\nparallel for x in xs:\n  session "Item {x}"\n'

    async def main():
        host = HostProvider()
        run = asyncio.ensure_future(runner.execute(_inline(source, tmp_path, max_concurrency=2),
                                                   host, host.observe))
        seen = []
        while not run.done():
            items = await host.wait_for_items(0.2)
            seen.append(len(items))
            for item in items:
                await host.complete_session(item.token, "ok")
        return seen, await run

    seen, outcome = asyncio.run(main())
    assert outcome.status == "completed" and max(seen) == 2


def test_first_join_ends_the_losers_tokens(tmp_path):
    source = 'parallel ("first"):\n  a = session "A"\n  b = session "B"\n'

    async def main():
        host = HostProvider()
        run = asyncio.ensure_future(runner.execute(_inline(source, tmp_path), host, host.observe))
        items = await host.wait_for_items(60)
        assert len(items) == 2
        winner, loser = sorted(items, key=lambda i: i.request.binding, reverse=True)
        await host.complete_session(winner.token, "b wins")
        outcome = await run
        with pytest.raises(ItemRefused, match="no longer needs it"):
            await host.complete_session(loser.token, "too late")
        return outcome

    outcome = asyncio.run(main())
    assert outcome.status == "completed"
    assert bindings_of(tmp_path, outcome.run_id)[("b", None)] == "b wins"


def test_resend_is_idempotent_and_refusals_name_the_reason(tmp_path):
    source = 'let x = session "Write"\nif **x looks right**:\n  output o = session "Yes"\n'

    async def main():
        host = HostProvider()
        run = asyncio.ensure_future(runner.execute(_inline(source, tmp_path), host, host.observe))
        (item,) = await host.wait_for_items(60)
        first = await host.complete_session(item.token, "v1")
        assert await host.complete_session(item.token, "v1") == first
        with pytest.raises(ItemRefused, match="has ended"):
            await host.complete_session(item.token, "v2")
        (judgment,) = await host.wait_for_items(60)
        assert judgment.to_dict()["condition"] == "x looks right"
        with pytest.raises(ItemRefused, match="true or false"):
            await host.submit_verdict(judgment.token, "maybe")
        with pytest.raises(ItemRefused, match="not a session"):
            await host.complete_session(judgment.token, "v")
        with pytest.raises(ItemRefused, match="unknown session token"):
            await host.complete_session("gs_nothing", "v")
        assert await host.submit_verdict(judgment.token, "TRUE") is True
        (last,) = await host.wait_for_items(60)
        await host.complete_session(last.token, "yes")
        return await run

    outcome = asyncio.run(main())
    assert outcome.outputs == {"o": "yes"}


def test_failed_session_is_retried_then_caught(tmp_path):
    source = ('try:\n  let x = session "Flaky"\n    retry: 1\ncatch as err:\n'
              '  output o = session "Recover"\n    context: err\n')

    async def main():
        host = HostProvider()
        run = asyncio.ensure_future(runner.execute(_inline(source, tmp_path), host, host.observe))
        (first,) = await host.wait_for_items(60)
        assert "retrying" in await host.fail_session(first.token, "rate limited")
        (second,) = await host.wait_for_items(60)
        assert second.request.attempt == 2 and second.token != first.token
        assert second.brief.attempt == 2 and second.brief.failures == ("rate limited",)
        assert "attempt 1: rate limited" in attempt_note(second.brief)
        assert "error handling" in await host.fail_session(second.token, "still down")
        (recover,) = await host.wait_for_items(60)
        assert recover.request.prompt == "Recover"
        await host.complete_session(recover.token, "recovered")
        return await run

    outcome = asyncio.run(main())
    assert outcome.outputs == {"o": "recovered"}


def test_restart_reuses_finished_sessions_and_verdicts(tmp_path):
    source = 'let a = session "One"\nif **a is good**:\n  let b = session "Two"\noutput o = b\n'

    async def first_half():
        host = HostProvider()
        job = _inline(source, tmp_path)
        run = asyncio.ensure_future(runner.execute(job, host, host.observe))
        (one,) = await host.wait_for_items(60)
        await host.complete_session(one.token, "A")
        (judgment,) = await host.wait_for_items(60)
        await host.submit_verdict(judgment.token, True, "fine")
        (two,) = await host.wait_for_items(60)
        run.cancel()  # the server goes away with "Two" pending
        with pytest.raises(asyncio.CancelledError):
            await run
        return job.run_id, two.request.prompt

    run_id, pending_prompt = asyncio.run(first_half())

    async def second_half():
        host = HostProvider()
        job = runner.resume_job(run_id, tmp_path, None, options=Options(sleep=no_sleep))
        run = asyncio.ensure_future(runner.execute(job, host, host.observe))
        items = await host.wait_for_items(60)
        assert [i.request.prompt for i in items] == [pending_prompt]  # only what was pending
        await answer_items(host, scripted({}), items)
        return await run

    outcome = asyncio.run(second_half())
    assert outcome.status == "completed" and outcome.reused == 1
    assert isinstance(SessionItem, type)
