"""The SQLite backend: a database per run (``.prose/runs/{id}/state.db``, beside the run's
files), project agents in ``.prose/agents.db``, user agents in ``~/.prose/agents.db``."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from openprose.state.backends.sql import (
    Cursor,
    SqlBackend,
    tables,
)
from openprose.state.backends.sqlite_schema import ensure_schema
from openprose.state.driver import DriverHolder
from openprose.state.errors import (
    DamagedState,
    PathEscapeError,
    RunNotFound,
    StateDiskFull,
)
from openprose.state.files import atomic_write
from openprose.state.records import (
    RunRecord,
    damaged_record,
)


@contextmanager
def sqlite_errors(path: Path) -> Iterator[None]:
    """SQLite's errors about the file itself as state errors naming it: a full disk is
    :class:`StateDiskFull`, a file that is not a database (or is corrupt)
    :class:`DamagedState`. Others (a busy database, a bad statement) pass unchanged."""
    try:
        yield
    except sqlite3.DatabaseError as err:
        name = getattr(err, "sqlite_errorname", "")
        if name == "SQLITE_FULL":
            raise StateDiskFull(f"cannot write {path}: the disk is full") from None
        if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or "not a database" in str(err):
            raise DamagedState(f"{path} is damaged: {err} (move it away to start the run "
                               "over, or restore it from a backup)") from None
        raise


BUSY_SECONDS = 60  # how long an open or a write waits for another process's lock


def _prepare(conn: sqlite3.Connection) -> None:
    """A SQLite database's settings, and its tables created or migrated (idempotent)."""
    # Pages freed by rewrites (state_md) are returned to the file at close.
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    _wal(conn)
    ensure_schema(conn, sqlite_tables)


def _wal(conn: sqlite3.Connection) -> None:
    """Put the database in WAL mode. Switching a database that is not yet in WAL mode fails
    with SQLITE_BUSY at once, without the busy handler, while another connection holds a
    lock on it (another process opening it at the same moment, converting or migrating it):
    that is retried until the lock is gone, for up to :data:`BUSY_SECONDS`."""
    deadline = time.monotonic() + BUSY_SECONDS
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as err:
            # Any SQLITE_BUSY variant (BUSY_RECOVERY just after a killed writer, …).
            if getattr(err, "sqlite_errorcode", 0) & 0xFF != sqlite3.SQLITE_BUSY or \
                    time.monotonic() > deadline:
                raise
        time.sleep(0.005)  # polls the other process's lock (SQLite's own handler sleeps too)


def sqlite_tables() -> list[str]:
    return tables("", "INTEGER PRIMARY KEY AUTOINCREMENT", "TEXT",
                  "strftime('%Y-%m-%dT%H:%M:%SZ','now')")


class SqliteBackend(SqlBackend):
    """``.prose/runs/{id}/state.db`` per run; project agents in ``.prose/agents.db``, user
    agents in ``~/.prose/agents.db``. WAL, a busy timeout, ``synchronous=FULL`` for durable
    commits and ``NORMAL`` for the rest."""

    name = "sqlite"

    def __init__(self, project_root: Path, home: Path) -> None:
        super().__init__(project_root, home)
        self._local = threading.local()
        self._ready: set[Path] = set()
        self._ready_lock = threading.Lock()
        self._all: list[tuple[Path, sqlite3.Connection]] = []
        #: Each thread's connections by database (see :meth:`release`).
        self._caches: list[dict[Path, sqlite3.Connection]] = []
        self._writers: dict[Path, threading.Lock] = {}

    def db_path(self, run_id: str | None, scope: str) -> Path:
        if scope == "project":
            return self.root / ".prose" / "agents.db"
        if scope == "user":
            return self.home / ".prose" / "agents.db"
        assert run_id is not None
        return self.files.contained(self.files.run_dir(run_id)) / "state.db"

    def _connection(self, path: Path) -> sqlite3.Connection:
        cache: dict[Path, sqlite3.Connection] | None = self._local.__dict__.get("conns")
        if cache is None:
            cache = self._local.conns = {}
            with self._ready_lock:
                self._caches.append(cache)
        conn = cache.get(path)
        if conn is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                raise PathEscapeError(f"{path} is a symbolic link; state is never read or "
                                      "written through a link")
            conn = sqlite3.connect(path, timeout=BUSY_SECONDS, isolation_level=None,
                                   check_same_thread=False)
            try:
                with sqlite_errors(path), self._ready_lock:
                    if path not in self._ready:
                        _prepare(conn)
                        self._ready.add(path)
            except BaseException:
                conn.close()
                raise
            with self._ready_lock:
                self._all.append((path, conn))
            cache[path] = conn
        return conn

    def create_run(self, record: RunRecord) -> None:
        """The run's directory with its database and run row, renamed into place whole (into
        the directory of the same run on another backend, if there is one)."""
        if (self.files.run_dir(record.id) / "state.db").exists():
            super().create_run(record)  # a database without a run row: the row goes in
            return

        def build(directory: Path) -> None:
            (directory / "imports").mkdir()  # an import run then arrives by one rename
            atomic_write(directory / "program.prose", record.program_source)
            conn = sqlite3.connect(directory / "state.db", timeout=BUSY_SECONDS,
                                   isolation_level=None)
            try:
                _prepare(conn)
                conn.execute("PRAGMA synchronous = FULL")
                conn.execute(self.q(self.INSERT_RUN), self._run_row(record))
            finally:
                conn.close()

        self.files.build_run_dir(record.id, build, "state.db")

    def _open(self, run_id: str | None, scope: str) -> tuple[Path, sqlite3.Connection]:
        """The database holding ``run_id``'s rows (or the agents' store) and a connection."""
        path = self.db_path(run_id, scope)
        if scope == "run" and not path.exists() and not path.parent.is_dir():
            raise RunNotFound(f"no run {run_id} under {self.files.runs}")
        return path, self._connection(path)

    def fetch(self, run_id: str | None, sql: str, params: tuple[Any, ...] = (),
              scope: str = "run") -> list[tuple[Any, ...]]:
        path, conn = self._open(run_id, scope)
        with sqlite_errors(path):
            return conn.execute(self.q(sql), params).fetchall()

    @contextmanager
    def tx(self, run_id: str | None, *, durable: bool, scope: str = "run") -> Iterator[Cursor]:
        path, conn = self._open(run_id, scope)
        # Writers in this process queue on a lock instead of SQLite's sleeping busy handler
        # (fair and without sleeps); other processes still meet the busy timeout.
        with self._writer(path), sqlite_errors(path):
            conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:  # a failed COMMIT (disk full) leaves it open
                    conn.execute("ROLLBACK")
                raise

    def _writer(self, path: Path) -> threading.Lock:
        lock = self._writers.get(path)
        if lock is None:
            with self._ready_lock:
                lock = self._writers.setdefault(path, threading.Lock())
        return lock

    def lock_driver(self, run_id: str, holder: DriverHolder) -> Callable[[], None]:
        return self.files.lock_driver(run_id, holder)  # as on the filesystem

    def list_runs(self) -> list[RunRecord]:
        if not self.files.runs.is_dir():
            return []
        found = []
        for path in sorted(self.files.runs.glob("*/state.db")):
            # A database without its run row (left by opening a run of another backend)
            # is not a run.
            with contextlib.suppress(RunNotFound):
                try:
                    found.append(self.load_run(path.parent.name))
                except (DamagedState, PathEscapeError) as err:  # one never hides the rest
                    found.append(damaged_record(path.parent.name, err))
        return found

    def list_children(self, run_id: str) -> list[str]:
        imports = self.files.run_dir(run_id) / "imports"
        return [f"{run_id}/imports/{p.parent.name}" for p in sorted(imports.glob("*/state.db"))]

    def delete_run(self, run_id: str, *, keep_shared: bool = False) -> None:
        directory = self.files.run_dir(run_id)
        self.load_run(run_id)  # RunNotFound unless this backend holds it
        self._ready -= self._close_connections(directory)
        super().release(run_id)
        self.files.forget(run_id)
        if keep_shared or (directory / "run.json").exists():
            self.files.remove_parts(run_id, ["state.db", "state.db-wal", "state.db-shm"])
        else:
            self.files.remove_run_dir(run_id)

    def find_capability(self, token_hash: str, run_id: str | None = None
                        ) -> tuple[str, dict[str, Any]] | None:
        if run_id is not None:
            candidates = [run_id]
        elif self.files.runs.is_dir():
            candidates = [str(path.parent.relative_to(self.files.runs))
                          for path in self.files.runs.rglob("state.db")]
        else:
            candidates = []
        for candidate in candidates:
            rows = self.fetch(candidate, "SELECT body FROM capabilities WHERE hash = ?",
                              (token_hash,))
            if rows:
                return candidate, self.grant_from_json(
                    candidate, rows[0][0], self.table_location(candidate, "capabilities"))
        return None

    def release(self, run_id: str) -> None:
        super().release(run_id)
        self._close_connections(self.files.run_dir(run_id))
        self.files.release(run_id)

    def _close_connections(self, directory: Path) -> set[Path]:
        """Close every thread's connections to the databases under ``directory`` (a run's,
        with its imports'); returns their paths."""
        with self._ready_lock:
            inside = [(p, c) for p, c in self._all if p.is_relative_to(directory)]
            self._all = [(p, c) for p, c in self._all if not p.is_relative_to(directory)]
            for cache in self._caches:
                for path, _ in inside:
                    cache.pop(path, None)
        for _, conn in inside:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        return {path for path, _ in inside}

    def close(self) -> None:
        """Close every thread's connections; the last one to close folds the WAL back into
        the database, so a finished run leaves only ``state.db``."""
        with self._ready_lock:
            connections, self._all = self._all, []
            self._local = threading.local()
            self._caches = []
        vacuumed: set[Path] = set()
        for path, conn in connections:
            if path not in vacuumed:
                vacuumed.add(path)
                conn.execute("PRAGMA busy_timeout = 0")
                # If another process is writing, the freed pages are simply reused later.
                with contextlib.suppress(sqlite3.Error):
                    conn.executescript("PRAGMA incremental_vacuum")
            conn.close()


