"""The PostgreSQL backend: every run in one schema (default ``openprose``), through a
connection pool; the driver lock is an advisory lock."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from openprose.state.backends.sql import (
    Cursor,
    SqlBackend,
    tables,
)
from openprose.state.config import postgres_scrubbed, postgres_shown
from openprose.state.driver import DriverHolder, RunLocked
from openprose.state.errors import BackendUnavailable, StateError
from openprose.state.files import process_alive
from openprose.state.names import check_name
from openprose.state.records import RUN_STATUSES, RunRecord

# Columns added since the first release: PostgreSQL databases made before get them when
# opened (SQLite databases are migrated by sqlite_schema).
ADDED_COLUMNS = (("frames", "call_key", "TEXT"),)


class PostgresBackend(SqlBackend):
    """Every run in one PostgreSQL schema (default ``openprose``), through a connection pool.
    Non-durable writes commit with ``synchronous_commit = off``; tables prefixed ``x_`` are
    never touched."""

    name = "postgres"
    # Under READ COMMITTED two appends would read the same MAX(segment_number).
    SEGMENT_LOCK = "SELECT pg_advisory_xact_lock(hashtext(?))"

    def __init__(self, project_root: Path, home: Path, url: str, schema: str = "openprose",
                 max_connections: int = 16) -> None:
        super().__init__(project_root, home)
        try:
            import psycopg
            from psycopg_pool import ConnectionPool
        except ImportError as err:  # pragma: no cover - dependency is declared
            raise BackendUnavailable(f"psycopg is not installed: {err}") from err
        check_name(schema, "schema name")
        self.schema = schema
        self.prefix = f'"{schema}".'
        self.raw_cursor = psycopg.RawCursor
        try:  # one attempt first: a bad URL or an unreachable server is one clear line
            with psycopg.connect(url, connect_timeout=5) as first:
                problem = encoding_problem(first)
        except Exception as err:
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise BackendUnavailable(f"cannot connect to PostgreSQL at {postgres_shown(url)}: "
                                     f"{postgres_scrubbed(reason, url)}") from None
        if problem is not None:
            raise BackendUnavailable(f"cannot use PostgreSQL at {postgres_shown(url)}: {problem}")
        self.pool = ConnectionPool(url, min_size=1, max_size=max_connections, open=False,
                                   kwargs={"autocommit": True,
                                           "prepare_threshold": PREPARE_THRESHOLD})
        try:
            self.pool.open(wait=True, timeout=10)
        except Exception as err:
            self.pool.close()
            raise BackendUnavailable(f"cannot connect to PostgreSQL at {postgres_shown(url)}: "
                                     f"{postgres_scrubbed(str(err), url)}") from None
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(4242001)")
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            for ddl in tables(self.prefix, "BIGSERIAL PRIMARY KEY", "JSONB",
                              "to_char(now() at time zone 'utc', "
                              "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"):
                conn.execute(ddl)
            conn.execute(self.q(DRIVER_TABLE))
            for table, column, kind in ADDED_COLUMNS:
                conn.execute(f"ALTER TABLE {self.prefix}{table} ADD COLUMN IF NOT EXISTS "
                             f"{column} {kind}")
            _allow_queued(conn, self.prefix)
        self._psycopg = psycopg
        self._url = url
        self._idle_drivers: list[Any] = []  # driver lock connections holding no lock
        self._idle_lock = threading.Lock()

    def q(self, sql: str) -> str:
        return super().q(sql).replace("?", "%s")

    @contextmanager
    def tx(self, run_id: str | None, *, durable: bool, scope: str = "run") -> Iterator[Cursor]:
        with self.pool.connection() as conn, conn.transaction():
            if not durable:
                conn.execute("SET LOCAL synchronous_commit = off")
            yield conn  # type: ignore[misc]

    def fetch(self, run_id: str | None, sql: str, params: tuple[Any, ...] = (),
              scope: str = "run") -> list[tuple[Any, ...]]:
        with self.pool.connection() as conn:
            return conn.execute(self.q(sql), params).fetchall()

    def write(self, run_id: str | None, sql: str, params: tuple[Any, ...], *, durable: bool,
              scope: str = "run") -> None:
        # One autocommit round trip; one that need not be durable turns the WAL flush off
        # for its own transaction within the statement (see NO_FLUSH).
        with self.pool.connection() as conn:
            conn.execute(self.q(sql if durable else f"WITH s0 AS ({sql}) {NO_FLUSH}"), params)

    def write_all(self, run_id: str, parts: list[tuple[str, list[tuple[Any, ...]]]], *,
                  durable: bool) -> None:
        """Every statement's rows as one multi-row VALUES list (a statement without one, an
        ``UPDATE``, takes one row), and the statements as one statement of data-modifying
        CTEs: one round trip however many sessions start or finish together, without a WAL
        flush unless ``durable``. (An upsert's rows must not repeat a key.)"""
        statements: list[str] = []
        params: list[Any] = []
        for sql, rows in parts:
            if rows:
                statements.append(_numbered_values(sql, len(rows), len(params) + 1))
                params.extend(value for row in rows for value in row)
        if not statements:
            return
        if len(params) > MAX_PARAMETERS:
            super().write_all(run_id, parts, durable=durable)
            return
        if not durable:
            statements.append(NO_FLUSH)
        *first, last = statements
        ctes = ", ".join(f"s{i} AS ({sql})" for i, sql in enumerate(first))
        statement = (f"WITH {ctes} {last}" if ctes else last).replace("{p}", self.prefix)
        with self.pool.connection() as conn:  # numbered parameters: psycopg parses nothing
            self.raw_cursor(conn).execute(statement, params)

    def lock_driver(self, run_id: str, holder: DriverHolder) -> Callable[[], None]:
        """A session-level advisory lock on a connection of its own, held until released:
        PostgreSQL drops it when that connection ends, with the process or otherwise. Who
        holds it is recorded in the ``driver`` table for a refused driver to read. A released
        lock's connection is kept for the next run's lock (a process driving runs in turn, a
        worker, would otherwise start a server process per run)."""
        key = driver_key(self.schema, run_id)
        row = (run_id, holder.pid, holder.host, holder.since)
        for kept in (True, False):
            conn = self._driver_connection(kept)
            try:  # taken, and then its holder recorded: one round trip
                taken = conn.execute(self.q(LOCK_DRIVER), (
                    key, f"openprose driver {run_id}", *row)).fetchone()[0]
                break
            except self._psycopg.OperationalError:  # a kept one the server has ended
                conn.close()
                if not kept:
                    raise
            except BaseException:  # a session lock outlives a failed statement
                conn.close()
                raise
        try:
            if not taken:

                def recorded() -> DriverHolder | None:
                    rows = conn.execute(self.q("SELECT pid, host, since FROM {p}driver"
                                               " WHERE run_id = ?"), (run_id,)).fetchall()
                    return DriverHolder(*rows[0]) if rows else None

                found = recorded()
                if found is None or not _ended_here(found) or \
                        not _after_backend_ends(conn, key, run_id, found, recorded):
                    raise RunLocked(run_id, recorded())
                conn.execute(self.q(UPSERT_DRIVER), row)
        except BaseException:
            conn.close()
            raise

        def release() -> None:
            unlocked = False
            with contextlib.suppress(self._psycopg.Error):
                unlocked = conn.execute("SELECT pg_advisory_unlock(%s), set_config("
                                        "'application_name', 'openprose driver', false)",
                                        (key,)).fetchone()[0]
            with self._idle_lock:
                if unlocked and not self.pool.closed and len(self._idle_drivers) < IDLE_DRIVERS:
                    self._idle_drivers.append(conn)  # holds no lock: the next one's
                    return
            conn.close()

        return release

    def _driver_connection(self, kept: bool) -> Any:
        """A connection holding no lock: with ``kept``, one kept from a released lock when
        there is one; else a new one."""
        with self._idle_lock:
            while kept and self._idle_drivers:
                conn = self._idle_drivers.pop()
                if not conn.closed:
                    return conn
        try:
            return self._psycopg.connect(self._url, autocommit=True,
                                         application_name="openprose driver",
                                         prepare_threshold=PREPARE_THRESHOLD)
        except self._psycopg.Error as err:
            raise BackendUnavailable(f"cannot connect to PostgreSQL at "
                                     f"{postgres_shown(self._url)}: "
                                     f"{postgres_scrubbed(str(err), self._url)}") from None

    def list_runs(self) -> list[RunRecord]:
        rows = self.fetch(None, self.RUN_COLUMNS + " WHERE position('/imports/' in id) = 0"
                          " ORDER BY id")
        return [self._record(row) for row in rows]

    def list_children(self, run_id: str) -> list[str]:
        prefix = f"{run_id}/imports/"
        rows = self.fetch(None, "SELECT id FROM {p}run WHERE substr(id, 1, ?) = ?",
                          (len(prefix), prefix))
        return sorted(r[0] for r in rows if "/imports/" not in r[0][len(prefix):])

    def delete_run(self, run_id: str, *, keep_shared: bool = False) -> None:
        self.load_run(run_id)  # RunNotFound unless this backend holds it
        nested = f"{run_id}/imports/%"
        with self.tx(run_id, durable=True) as conn:
            conn.execute(self.q("DELETE FROM {p}run WHERE id = ? OR id LIKE ?"),
                         (run_id, nested))
            for table in ("execution", "bindings", "agents", "agent_segments", "imports",
                          "journal", "frames", "capabilities", "permissions", "driver"):
                conn.execute(self.q(f"DELETE FROM {{p}}{table} WHERE run_id = ? OR"
                                    " run_id LIKE ?"), (run_id, nested))
        self.release(run_id)
        directory = self.files.run_dir(run_id)
        shared = any((directory / marker).exists() for marker in ("run.json", "state.db"))
        if directory.is_dir() and not (keep_shared or shared):
            self.files.remove_run_dir(run_id)

    def find_capability(self, token_hash: str, run_id: str | None = None
                        ) -> tuple[str, dict[str, Any]] | None:
        rows = self.fetch(None, "SELECT run_id, body FROM {p}capabilities WHERE hash = ?",
                          (token_hash,))
        if not rows:
            return None
        run_id, body = rows[0]
        return run_id, self.grant_from_json(run_id, body,
                                            self.table_location(run_id, "capabilities"))

    def close(self) -> None:
        with self._idle_lock:
            idle, self._idle_drivers = self._idle_drivers, []
        for conn in idle:
            conn.close()
        self.pool.close()


def _allow_queued(conn: Any, prefix: str) -> None:
    """Let a database made before the "queued" status (worker queues) hold it."""
    row = conn.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid ="
                       " %s::regclass AND conname = 'run_status_check'",
                       (f"{prefix}run",)).fetchone()
    if row is not None and "queued" not in row[0]:
        conn.execute(f"ALTER TABLE {prefix}run DROP CONSTRAINT run_status_check")
        conn.execute(f"ALTER TABLE {prefix}run ADD CONSTRAINT run_status_check CHECK (status IN"
                     f" ({', '.join(repr(s) for s in RUN_STATUSES)}))")


# Who holds each run's driver lock (PostgreSQL only: the lock itself is advisory).
DRIVER_TABLE = ("CREATE TABLE IF NOT EXISTS {p}driver (run_id TEXT PRIMARY KEY,"
                " pid INTEGER NOT NULL, host TEXT NOT NULL, since TEXT NOT NULL)")
_NEW_HOLDER = (" ON CONFLICT (run_id) DO UPDATE SET pid = excluded.pid, host = excluded.host,"
               " since = excluded.since")
UPSERT_DRIVER = "INSERT INTO {p}driver (run_id, pid, host, since) VALUES (?,?,?,?)" + _NEW_HOLDER
# A run's driver lock tried, and when taken its holder recorded, in one statement.
LOCK_DRIVER = ("WITH lock AS (SELECT pg_try_advisory_lock(?) AS taken,"
               " set_config('application_name', ?, false)), holder AS ("
               "INSERT INTO {p}driver (run_id, pid, host, since) SELECT ?, ?, ?, ? FROM lock"
               " WHERE lock.taken" + _NEW_HOLDER + ") SELECT taken FROM lock")


def driver_key(schema: str, run_id: str) -> int:
    """The advisory lock key of a run: 64 bits of a hash of schema and run id."""
    digest = hashlib.sha256(f"openprose-driver\0{schema}\0{run_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


# The main statement of a write that need not be durable, its changes in data-modifying
# CTEs: its transaction commits without waiting for the WAL to reach the disk (as under
# ``SET LOCAL synchronous_commit = off``, without a transaction's extra round trips). A flush
# costs the server several times the write itself, and the writer a disk's latency; a later
# durable commit flushes this one too, in order. A server crash may lose such a write, never
# a durable one after it.
NO_FLUSH = "SELECT set_config('synchronous_commit', 'off', true)"

# A statement is prepared (planned once per connection) from its second execution on a
# connection, not psycopg's default sixth: a worker's per-run statements (reading a run,
# locking it, ending it) run once a run, spread over the pool's connections, so at the
# default most of them were planned anew each time.
PREPARE_THRESHOLD = 1

# Driver lock connections kept idle for the next runs' locks, at most.
IDLE_DRIVERS = 8

# PostgreSQL takes at most 65,535 parameters in one statement.
MAX_PARAMETERS = 60_000


def _values_group(sql: str) -> str:
    start = sql.index("VALUES (") + len("VALUES ")
    return sql[start : sql.index(")", start) + 1]


@lru_cache(maxsize=512)  # the same few statements and sizes, several times a session
def _numbered_values(sql: str, rows: int, first: int) -> str:
    """``INSERT ... VALUES (?,?)`` for ``rows`` rows, in PostgreSQL's numbered parameters
    from ``$first`` on; another statement (an ``UPDATE``) takes one row."""
    if "VALUES (" not in sql:
        if rows != 1:
            raise ValueError(f"one row only, not {rows}: {sql}")
        head, *rest = sql.split("?")
        return head + "".join(f"${first + i}{part}" for i, part in enumerate(rest))
    group = _values_group(sql)
    width = group.count("?")
    numbered = ",".join("(" + ",".join(f"${first + row * width + column}"
                                       for column in range(width)) + ")"
                        for row in range(rows))
    return sql.replace(group, numbered, 1)


BACKEND_END_SECONDS = 30  # how long a dead driver's PostgreSQL connection may take to end


def _ended_here(holder: DriverHolder) -> bool:
    """Whether ``holder`` was a process of this host that no longer exists."""
    return holder.host == socket.gethostname() and not process_alive(holder.pid)


def _after_backend_ends(conn: Any, key: int, run_id: str, holder: DriverHolder,
                        recorded: Callable[[], DriverHolder | None]) -> bool:
    """Take the driver lock ``key`` once the server has ended the connection of its dead
    ``holder``: a killed process's connection, and the advisory lock with it, lives on until
    PostgreSQL notices the closed socket. True when the lock is taken; False when another
    driver holds it (``recorded``, the driver table's holder, names someone else). Raises
    :class:`StateError` when the connection has not ended within
    :data:`BACKEND_END_SECONDS`."""
    row = conn.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND classid = %s AND objid = %s",
        ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchone()
    deadline = time.monotonic() + BACKEND_END_SECONDS
    while row is not None and conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s",
                                           (row[0],)).fetchone():
        if recorded() != holder:  # a live driver took the run before its record was read
            return False
        if time.monotonic() > deadline:
            raise StateError(
                f"run {run_id}: its driver ({holder.describe()}) has ended, but PostgreSQL "
                f"still holds its lock on connection {row[0]} after {BACKEND_END_SECONDS} s; "
                f"try again, or end it with SELECT pg_terminate_backend({row[0]})")
        time.sleep(0.02)  # polls the server: another backend's end cannot be waited on
    return bool(conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0])


def encoding_problem(conn: Any) -> str | None:
    """Why the database on psycopg connection ``conn`` cannot hold runs, or ``None``. Only
    UTF8 will do: in any other encoding text would not round-trip (a SQL_ASCII database,
    which initdb makes when no locale is set, even reads back as bytes)."""
    encoding = conn.info.parameter_status("server_encoding")
    if encoding == "UTF8":
        return None
    return (f"database {conn.info.dbname!r} has encoding {encoding}, openprose needs UTF8 "
            "(CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0, or a cluster made "
            "with initdb -E UTF8 --locale=C.UTF-8 as scripts/pg-up does)")
