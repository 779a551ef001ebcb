"""What a worker costs the database per run and per session, counted, not timed: a claimed
run is read once (its journal too); runs driven one after another share one driver
connection; a render of state.md is one round trip, and a worker renders less often than
`prose run`; a query of the queue is one round trip. (The time and CPU per session are
measured by bench/cluster.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.engine.cli_procs import make_project

from openprose import state
from openprose.engine import runner
from openprose.engine.permissions import Grants
from openprose.language import compile as compile_program
from openprose.workers import queue as q
from openprose.workers import worker

pytestmark = pytest.mark.postgres

PROGRAM = 'let a = session "one"\noutput o = session "two"\n'


@pytest.fixture
def root(tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from make_project(tmp_path / "project", PROGRAM,
                            "latency: 0\ndefault_output: ok\n", "postgres", monkeypatch)


def queued(root: Path, source: str = PROGRAM) -> str:
    compiled = compile_program(source, "p.prose").program
    assert compiled is not None
    job = runner.Job(source=source, file="p.prose", program=compiled, project_root=root,
                     backend="postgres")
    job.settings = {"provider": "scripted", "script": str(root / "s.yaml")}
    return q.enqueue(job, Grants())[0]


def sessions(count: int) -> str:
    """A program of ``count`` sessions, one after another."""
    return "".join(f'let s{i} = session "step {i}"\n' for i in range(count - 1)) + \
        'output o = session "last"\n'


def drive(root: Path, shared: state.StateStore, run_id: str) -> None:
    """Drive ``run_id`` as a worker does, in the worker's ``shared`` store."""
    assert asyncio.run(worker.task(root.resolve(), shared, None)(None, run_id)) == "completed"


def test_a_claimed_run_is_read_once(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = queued(root)
    shared = state.open_store(root, "postgres")
    loads: list[str] = []
    read = shared.backend.list_frames  # read by every load of a run, by nothing else here

    def counted(run: str) -> list[state.Frame]:
        loads.append(run)
        return read(run)

    monkeypatch.setattr(shared.backend, "list_frames", counted)
    journals: list[str] = []
    read_journal = shared.backend.read_journal

    def counted_journal(run: str) -> list[state.JournalEntry]:
        journals.append(run)
        return read_journal(run)

    monkeypatch.setattr(shared.backend, "read_journal", counted_journal)
    try:
        drive = worker.task(root.resolve(), shared, None)
        assert asyncio.run(drive(None, run_id)) == "completed"
    finally:
        shared.close()
    assert loads == [run_id]
    assert journals == [run_id]  # by the repair, which hands it to the load


def test_runs_in_turn_share_one_driver_connection(root: Path) -> None:
    ids = [queued(root) for _ in range(3)]
    with state.open_store(root, "postgres") as store:
        backends = set()
        for run_id in ids:
            with store.driver_lock(run_id):
                backends |= {pid for (pid,) in store.backend.fetch(
                    None, "SELECT pid FROM pg_stat_activity WHERE application_name = ?",
                    (f"openprose driver {run_id}",))}
    assert len(backends) == 1, backends


def test_a_render_of_state_is_one_round_trip(root: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    import psycopg

    with state.open_store(root, "postgres") as store:
        run = store.create_run(PROGRAM, "p.prose")
        trips = round_trips(monkeypatch, psycopg)
        run.update_state(state.StateSnapshot(tuple(
            state.StatementStatus(line, line, "complete") for line in (1, 2))))
        assert trips == [1]
        assert "o = session" in run.state_text()
        rows = store.backend.fetch(run.id, "SELECT statement_index, status FROM"
                                   " {p}execution WHERE run_id = ? ORDER BY 1", (run.id,))
    assert rows == [(1, "completed"), (2, "completed")]


def test_round_trips_per_session_and_per_run(root: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    """A worker's run costs its store two round trips a session (its intent, its commit)
    and 12 more: reading and locking the run (6), marking it running, its first state.md,
    looking for imported runs' journals for the digest, its end (the status with its last
    state.md, one write) and the lock's release. (Renders between are held off here: they
    come with time, every RENDER_INTERVAL.)"""
    import psycopg

    monkeypatch.setattr(worker, "RENDER_INTERVAL", 1e9)
    ids = {count: queued(root, sessions(count)) for count in (1, 4)}
    with state.open_store(root, "postgres") as shared:
        drive(root, shared, queued(root))  # the pool's connections open, caches fill
        counted, trips = round_trips(monkeypatch, psycopg), {}
        for count, run_id in ids.items():
            before = counted[0]
            drive(root, shared, run_id)
            trips[count] = counted[0] - before
    assert (trips[4] - trips[1]) / 3 == 2
    assert trips[1] - 2 == 12


def test_the_call_log_is_opened_once_a_run(root: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    """The scripted provider's call log (three lines a session) is opened and checked once,
    then appended to, until the run ends."""
    import os

    (root / "s.yaml").write_text("latency: 0\ndefault_output: ok\ncall_log: calls.jsonl\n")
    run_id = queued(root, sessions(3))
    opened: list[str] = []
    real_open = os.open

    def counted(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith("calls.jsonl"):
            opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counted)
    with state.open_store(root, "postgres") as shared:
        drive(root, shared, run_id)
    lines = (root / "calls.jsonl").read_text().splitlines()
    assert len(lines) == 9  # start, end, committed: three sessions
    assert len(opened) == 1


def test_a_statement_is_prepared_on_its_second_use(root: Path) -> None:
    """A run's reads (once a run, spread over the pool's connections) are planned once per
    connection, not at each use until psycopg's default sixth."""
    run_id = queued(root)
    with state.open_store(root, "postgres") as store:
        for _ in range(2):  # one after another: on the pool's one connection
            store.backend.load_run(run_id)
        prepared = [text for (text,) in store.backend.fetch(
            None, "SELECT statement FROM pg_prepared_statements")]
    assert any("FROM" in text and "run WHERE id" in text for text in prepared), prepared


def round_trips(monkeypatch: pytest.MonkeyPatch, psycopg: Any) -> list[int]:
    """A count, from now on, of the statements this process sends (a transaction's BEGIN
    and COMMIT count too)."""
    count = [0]
    execute, transaction = psycopg.Cursor.execute, psycopg.Connection.transaction

    def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return execute(self, *args, **kwargs)

    def counted_transaction(self: Any, *args: Any, **kwargs: Any) -> Any:
        count[0] += 2
        return transaction(self, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted_execute)
    monkeypatch.setattr(psycopg.Connection, "transaction", counted_transaction)
    return count


def test_a_queue_query_is_one_round_trip(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """procrastinate's pool checked each connection with a round trip of its own before each
    query; now only one the server has stirred (here: ended) is checked, and replaced."""
    import psycopg

    url, schema = q.connection(root)
    q.install(url, schema)
    count = [0]
    execute = psycopg.AsyncCursor.execute

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return await execute(self, *args, **kwargs)

    async def go() -> None:
        app = q.make_app(url, schema, max_connections=1)
        async with app.open_async():
            one = app.connector.execute_query_one_async
            pid = (await one("SELECT pg_backend_pid() AS pid"))["pid"]
            monkeypatch.setattr(psycopg.AsyncCursor, "execute", counted)
            for _ in range(3):
                assert (await one("SELECT pg_backend_pid() AS pid"))["pid"] == pid
            assert count[0] == 3
            with psycopg.connect(url, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", (pid,))
                while other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s",
                                    (pid,)).fetchone():
                    pass  # until the server process has ended
            assert (await one("SELECT pg_backend_pid() AS pid"))["pid"] != pid

    asyncio.run(go())


def test_a_worker_renders_state_less_often(root: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    """Every render of a run a worker drives waits the worker's interval before the next."""
    from openprose.engine import state_journal

    run_id = queued(root)
    intervals: list[float] = []
    render = state_journal.StateJournal.render

    def counted(self: state_journal.StateJournal) -> None:
        intervals.append(self.render_interval)
        render(self)

    monkeypatch.setattr(state_journal.StateJournal, "render", counted)
    shared = state.open_store(root, "postgres")
    try:
        drive = worker.task(root.resolve(), shared, None)
        assert asyncio.run(drive(None, run_id)) == "completed"
    finally:
        shared.close()
    assert intervals and set(intervals) == {worker.RENDER_INTERVAL}
    assert worker.RENDER_INTERVAL > state_journal.RENDER_INTERVAL


def test_a_worker_not_sweeping_waits_for_the_lock_without_asking(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While another worker sweeps, a worker waits for the sweeper's lock on the server
    (asked once, granted when the holder lets go or its connection ends) rather than asking
    again every heartbeat; then it sweeps. A server's statement and lock timeouts, which
    would end the wait, are off on its connection."""
    import time
    from types import SimpleNamespace

    import psycopg

    url, schema = q.connection(root)
    queue = q.queue_name(schema, "default")
    count = [0]
    execute = psycopg.AsyncCursor.execute

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return await execute(self, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", counted)
    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=50ms -c statement_timeout=50ms")

    async def go() -> None:
        swept = asyncio.Event()

        async def stalled_jobs(**_: Any) -> list[Any]:
            swept.set()
            return []

        app = SimpleNamespace(job_manager=SimpleNamespace(get_stalled_jobs=stalled_jobs))
        holder = psycopg.connect(url, autocommit=True)
        holder.execute("SELECT pg_advisory_lock(%s)", (worker._key("sweeper", schema, queue),))
        sweeper = asyncio.create_task(worker._sweep(app, url, schema, queue, 0.01, 5))
        deadline = time.monotonic() + 60  # a bound for the failure, not a timing
        while not holder.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = 'openprose worker"
                " sweeper' AND wait_event_type = 'Lock'").fetchone():
            assert time.monotonic() < deadline, "the sweeper never waited for the lock"
            await asyncio.sleep(0.01)
        assert count[0] == 2 and not swept.is_set()  # the timeouts off, the lock asked
        holder.close()  # the lock goes with the holder's connection
        await asyncio.wait_for(swept.wait(), 60)
        sweeper.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sweeper

    asyncio.run(go())
