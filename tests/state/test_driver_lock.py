"""One driver per run: the driver lock, on every backend, with real processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from openprose.state import DriverLock, RunLocked, RunNotFound, StateError
from openprose.state.backends import postgres

HOLD = """\
import json, sys, time
from openprose.state import open_store
root, backend, url, schema, run_id = sys.argv[1:]
kw = {"postgres_url": url, "schema": schema} if backend == "postgres" else {}
store = open_store(root, backend, home=root + "/home", **kw)
lock = store.driver_lock(run_id)
print("held", flush=True)
time.sleep(600)
"""


def _run(store, program):
    return store.create_run(program, "p.prose")


def test_a_second_driver_is_refused_naming_the_holder(stores, program):
    store = stores.open()
    run_id = _run(store, program).id
    lock = store.driver_lock(run_id)
    assert isinstance(lock, DriverLock) and lock.held
    other = stores.open()  # another store (a restart, another client) of the same project
    with pytest.raises(RunLocked) as refused:
        other.driver_lock(run_id)
    assert refused.value.holder == lock.holder
    assert refused.value.holder.pid == os.getpid()
    assert refused.value.holder.host == socket.gethostname()
    assert f"pid {os.getpid()} on {socket.gethostname()} since " in str(refused.value)
    with pytest.raises(RunLocked):  # the same store cannot take it twice either
        store.driver_lock(run_id)
    lock.release()
    lock.release()  # a second release does nothing
    with other.driver_lock(run_id) as again:
        assert again.held
    assert not again.held
    store.driver_lock(run_id).release()


def test_closing_the_store_keeps_the_lock(stores, program):
    store = stores.open()
    run_id = _run(store, program).id
    lock = store.driver_lock(run_id)
    store.close()
    with pytest.raises(RunLocked):
        stores.open().driver_lock(run_id)
    lock.release()
    stores.open().driver_lock(run_id).release()


def test_locks_are_per_run(stores, program):
    store = stores.open()
    first, second = _run(store, program).id, _run(store, program).id
    with store.driver_lock(first), store.driver_lock(second):
        pass


def test_an_unknown_run_is_not_found_and_nothing_is_created(stores, project):
    store = stores.open()
    with pytest.raises(RunNotFound):
        store.driver_lock("20260101-000000-abcdef")
    assert not (project / ".prose" / "runs" / "20260101-000000-abcdef").exists()
    assert not (project / ".prose" / "locks").exists()


def test_a_new_run_is_locked_before_it_exists(stores, program):
    from openprose.state import new_run_id

    store = stores.open()
    run_id = new_run_id()
    with store.driver_lock(run_id, new=True):
        store.create_run(program, "p.prose", run_id=run_id)
        with pytest.raises(RunLocked):
            stores.open().driver_lock(run_id)


def test_the_lock_ends_with_a_killed_holder(stores, program, project):
    store = stores.open()
    run_id = _run(store, program).id
    args = [project, stores.backend, stores.url or "", stores.schema or "", run_id]
    holder = subprocess.Popen([sys.executable, "-c", HOLD, *map(str, args)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunLocked) as refused:
            store.driver_lock(run_id)
        assert refused.value.holder is not None and refused.value.holder.pid == holder.pid
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        holder.stdout.close()
    store.driver_lock(run_id).release()  # the kernel (or PostgreSQL) let go


def test_a_garbled_holder_record_still_refuses(fs_stores, program, project):
    store = fs_stores.open()
    run_id = _run(store, program).id
    with store.driver_lock(run_id):
        (project / ".prose" / "locks" / f"{run_id}.lock").write_text("not json")
        with pytest.raises(RunLocked, match="driven by another process"):
            fs_stores.open().driver_lock(run_id)
    with fs_stores.open().driver_lock(run_id) as lock:  # the next holder writes its own
        record = json.loads((project / ".prose" / "locks" / f"{run_id}.lock").read_text())
        assert record["pid"] == lock.holder.pid


# A driver stopped between taking the file lock and writing its record into the file: the
# real lock_driver, paused at its record write until told to go on.
PAUSED = """\
import os, sys
from openprose.state import open_store
root, run_id = sys.argv[1:]
store = open_store(root, "filesystem", home=root + "/home")
write = os.pwrite
def paused(fd, data, offset):
    os.pwrite = write
    print("paused", flush=True)
    sys.stdin.readline()
    return write(fd, data, offset)
os.pwrite = paused
lock = store.driver_lock(run_id)
print("held", flush=True)
sys.stdin.readline()
"""


def _waiting_for_a_lock(pid: int) -> bool:
    """Whether process ``pid`` waits for a file lock (Linux's /proc/locks lists waiters)."""
    return any(fields[1] == "->" and fields[5] == str(pid)
               for fields in map(str.split, Path("/proc/locks").read_text().splitlines()))


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")
def test_a_refusal_never_catches_the_holder_between_locking_and_recording(
        fs_stores, program, project):
    store = fs_stores.open()
    run_id = _run(store, program).id
    holder = subprocess.Popen([sys.executable, "-c", PAUSED, str(project), run_id],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    refused: list[BaseException] = []

    def refuse() -> None:
        try:
            fs_stores.open().driver_lock(run_id)
        except BaseException as err:
            refused.append(err)

    try:
        assert holder.stdout.readline() == "paused\n"
        second = threading.Thread(target=refuse)
        second.start()
        # The second driver either answers now or waits for the holder's record.
        deadline = time.monotonic() + 60
        while second.is_alive() and not _waiting_for_a_lock(os.getpid()) and \
                time.monotonic() < deadline:
            second.join(0.01)
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == "held\n"
        second.join(timeout=60)
        (err,) = refused
        assert isinstance(err, RunLocked), err
        assert err.holder is not None and err.holder.pid == holder.pid, str(err)
        assert f"pid {holder.pid} on {socket.gethostname()} since " in str(err)
    finally:
        holder.kill()
        holder.wait()
        holder.stdin.close()
        holder.stdout.close()


def test_a_dead_holders_connection_is_waited_for_then_the_lock_taken(pg_stores, program,
                                                                     project, monkeypatch):
    """A killed driver's PostgreSQL connection (and its advisory lock) lives on until the
    server notices the closed socket. Its backend stopped (SIGSTOP) keeps it from noticing:
    a new driver waits for the backend to end, then takes the run, rather than refusing
    with a holder that no longer exists."""
    store = pg_stores.open()
    run_id = _run(store, program).id
    taken: list[object] = []
    with _pg_holder(pg_stores, project, run_id) as (holder, _, backends):
        ((stopped, _),) = backends()
        try:
            os.kill(stopped, signal.SIGSTOP)
        except OSError as err:
            pytest.skip(f"cannot stop the server's backend (another machine or user): {err}")
        try:
            holder.kill()
            holder.wait()
            with monkeypatch.context() as patch:  # a backend that never ends: a clear refusal
                patch.setattr(postgres, "BACKEND_END_SECONDS", 0)
                with pytest.raises(StateError, match=f"pg_terminate_backend\\({stopped}\\)"):
                    store.driver_lock(run_id)
            second = _second_driver(store, run_id, taken, backends, besides=stopped)
        finally:
            os.kill(stopped, signal.SIGCONT)
    second.join(timeout=60)
    (lock,) = taken
    assert isinstance(lock, DriverLock) and lock.held, lock
    lock.release()


def test_a_live_driver_behind_a_dead_ones_record_is_named(pg_stores, program, project):
    """A driver takes a run whose last driver died: for a moment it holds the lock while the
    table still names the dead one. A refused driver waiting for the dead one's connection
    to end sees the new record, and names the live driver at once."""
    store = pg_stores.open()
    run_id = _run(store, program).id
    taken: list[object] = []
    with _pg_holder(pg_stores, project, run_id) as (holder, admin, backends):
        holder.kill()
        holder.wait()
        deadline = time.monotonic() + 60
        while backends():  # until the server has ended the dead driver's connection
            assert time.monotonic() < deadline, "the killed driver's connection never ended"
            time.sleep(0.02)
        # the live driver: its lock taken, its record not yet written
        key = postgres.driver_key(pg_stores.schema, run_id)
        assert admin.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]
        second = _second_driver(store, run_id, taken, backends)
        admin.execute(f'UPDATE "{pg_stores.schema}".driver SET pid = %s, host = %s,'
                      " since = %s WHERE run_id = %s",
                      (os.getpid(), socket.gethostname(), "2026-01-01T00:00:00Z", run_id))
        second.join(timeout=120)
    (refused,) = taken
    assert isinstance(refused, RunLocked), refused
    assert refused.holder is not None and refused.holder.pid == os.getpid(), str(refused)


@contextmanager
def _pg_holder(pg_stores, project: Path, run_id: str) -> Iterator[tuple[
        subprocess.Popen, Any, Callable[[], list[tuple[int, str]]]]]:
    """A driver process holding ``run_id`` on PostgreSQL, an admin connection, and the
    driver's backends as the server lists them (pid, current query); killed and closed after."""
    import psycopg

    args = [project, "postgres", pg_stores.url, pg_stores.schema, run_id]
    holder = subprocess.Popen([sys.executable, "-c", HOLD, *map(str, args)],
                              stdout=subprocess.PIPE, text=True)
    admin = psycopg.connect(pg_stores.url, autocommit=True)
    name = f"openprose driver {run_id}"

    def backends() -> list[tuple[int, str]]:
        return admin.execute("SELECT pid, query FROM pg_stat_activity"
                             " WHERE application_name = %s", (name,)).fetchall()

    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder, admin, backends
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        holder.stdout.close()
        admin.close()


def _second_driver(store, run_id: str, taken: list[object],
                   backends: Callable[[], list[tuple[int, str]]],
                   besides: int | None = None) -> threading.Thread:
    """A driver taking ``run_id`` on a thread (its lock or error appended to ``taken``),
    returned once it answered or polls the server for an old backend (not ``besides``) to end."""
    second = threading.Thread(
        target=lambda: taken.append(_outcome(lambda: store.driver_lock(run_id))))
    second.start()
    while second.is_alive() and not any(pid != besides and "pg_stat_activity" in query
                                        for pid, query in backends()):
        second.join(0.01)
    return second


def _outcome(call):
    try:
        return call()
    except Exception as err:  # the test asserts on what it got
        return err
