"""Many sessions at once on one store: every grant, write and commit lands, with no error
(in particular no "database is locked")."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from openprose.state import AgentRef, BindingRef, CapabilityError, Usage

THREADS = 64


def run_together(work: Callable[[int], object]) -> tuple[list[object], list[BaseException]]:
    """Run ``work(i)`` for every i on its own thread, all released at once by a barrier."""
    barrier = threading.Barrier(THREADS)
    results: list[object] = [None] * THREADS
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        try:
            barrier.wait()
            results[index] = work(index)
        except BaseException as err:
            with lock:
                errors.append(err)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results, errors


def test_many_sessions_grant_write_and_complete_at_once(stores, program):
    store = stores.open()
    run = store.create_run(program)
    run.write_binding(BindingRef("topic"), "tides", "input", "input topic")
    frame = run.push_frame("block")

    def session(index: int) -> str:
        ref = BindingRef(f"b{index}", frame.execution_id if index % 2 else None)
        grant = run.grant_session(ref, "let", f"let b{index} = session",
                                  context=[BindingRef("topic")])
        handle = store.session(grant.token)
        value = f"{handle.read_context('topic')} #{index}"
        if index % 4 == 0:  # the VM passes the value instead of the session writing it
            run.complete_session(grant.token, f"{index}:b", value=value, usage=Usage(1, 2))
        else:
            handle.write_output(value)
            run.complete_session(grant.token, f"{index}:b", usage=Usage(1, 2))
        return grant.token

    tokens, errors = run_together(session)
    assert errors == []

    def check(reader) -> None:
        for index in range(THREADS):
            ref = BindingRef(f"b{index}", frame.execution_id if index % 2 else None)
            assert reader.read_binding(ref).value == f"tides #{index}"
            assert reader.journal(f"{index}:b").value == f"tides #{index}"
        assert len(reader.bindings()) == THREADS + 1
        assert reader.usage_totals() == Usage(THREADS, 2 * THREADS, 0.0, THREADS)

    check(run)
    fresh = stores.open()
    check(fresh.open_run(run.id))
    for token in tokens:  # every token ended with its session
        with pytest.raises(CapabilityError):
            fresh.session(token)  # type: ignore[arg-type]


def test_many_sessions_append_segments_to_one_agent_at_once(stores, program):
    store = stores.open()
    run = store.create_run(program)
    agent = AgentRef("captain", "project")

    def session(index: int) -> int:
        grant = run.grant_session(BindingRef(f"r{index}"), "let", "resume: captain",
                                  agent=agent)
        handle = store.session(grant.token)
        number = handle.append_segment(f"segment from {index}")
        handle.write_output(str(number))
        run.complete_session(grant.token, f"{index}:r")
        return number

    numbers, errors = run_together(session)
    assert errors == []
    assert sorted(numbers) == list(range(1, THREADS + 1))  # type: ignore[type-var]
    segments = stores.open().create_run(program).segments(agent)
    assert [n for n, _ in segments] == list(range(1, THREADS + 1))
    assert sorted(text for _, text in segments) == sorted(
        f"segment from {i}" for i in range(THREADS))


def test_many_frames_pushed_at_once_get_distinct_ids(stores, program):
    store = stores.open()
    run = store.create_run(program)
    ids, errors = run_together(lambda i: run.push_frame("block", {"i": str(i)}).execution_id)
    assert errors == []
    assert sorted(ids) == list(range(1, THREADS + 1))  # type: ignore[type-var]
    again = stores.open().open_run(run.id)
    assert [f.execution_id for f in again.frames()] == list(range(1, THREADS + 1))
    assert again.push_frame("next").execution_id == THREADS + 1
