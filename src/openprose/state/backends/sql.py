"""SQL backends: SQLite (a database per run, like the filesystem layout) and PostgreSQL (one
``openprose`` schema for every run). The tables follow the seeds' schema with ``run_id``
columns; root scope is stored as execution_id 0 (ruling 4). Every write is one transaction;
durable steps commit with a synchronous flush, the rest (intents, grants, frames, state) do not.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Protocol

from openprose.state.backends.base import (
    LARGE_VALUE,
    Backend,
    CommitStep,
    RunRecord,
    entry_from_json,
    entry_to_json,
    grant_to_json,
)
from openprose.state.backends.filesystem import (
    FilesystemBackend,
    atomic_write,
    damaged_record,
    read_exact,
)
from openprose.state.backends.sqlite_schema import ensure_schema
from openprose.state.driver import DriverHolder, RunLocked
from openprose.state.errors import (
    BackendUnavailable,
    DamagedState,
    PathEscapeError,
    RunNotFound,
    StateDiskFull,
)
from openprose.state.models import (
    ROOT,
    AgentRef,
    Binding,
    BindingRef,
    Frame,
    ImportRecord,
    JournalEntry,
    StateSnapshot,
)
from openprose.state.names import check_name
from openprose.state.records import frame_from_data, grant_from_data, parse_json


class Cursor(Protocol):
    def execute(self, sql: str, params: tuple[Any, ...] = ...) -> Any: ...
    def cursor(self) -> Any: ...


def tables(p: str, serial: str, json_type: str, now: str) -> list[str]:
    return [
        f"""CREATE TABLE IF NOT EXISTS {p}run (
            id TEXT PRIMARY KEY, program_path TEXT, program_source TEXT,
            started_at TEXT NOT NULL, updated_at TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'running'
              CHECK (status IN ('running', 'completed', 'failed', 'interrupted')),
            state_mode TEXT NOT NULL, metadata {json_type}, vm_token_hash TEXT NOT NULL,
            error TEXT, state_md TEXT)""",
        f"""CREATE TABLE IF NOT EXISTS {p}execution (
            id {serial}, run_id TEXT NOT NULL, statement_index INTEGER NOT NULL,
            statement_text TEXT, status TEXT NOT NULL DEFAULT 'pending',
            started_at TEXT, completed_at TEXT, error_message TEXT, parent_id INTEGER,
            metadata {json_type}, UNIQUE (run_id, statement_index))""",
        f"""CREATE TABLE IF NOT EXISTS {p}bindings (
            name TEXT NOT NULL, run_id TEXT NOT NULL, execution_id INTEGER NOT NULL DEFAULT 0,
            kind TEXT NOT NULL, value TEXT, source_statement TEXT,
            created_at TEXT NOT NULL DEFAULT ({now}), updated_at TEXT NOT NULL DEFAULT ({now}),
            attachment_path TEXT, metadata {json_type},
            PRIMARY KEY (run_id, name, execution_id))""",
        f"""CREATE TABLE IF NOT EXISTS {p}agents (
            name TEXT NOT NULL, run_id TEXT NOT NULL DEFAULT '', scope TEXT NOT NULL
              CHECK (scope IN ('execution', 'project', 'user', 'custom')),
            memory TEXT, created_at TEXT NOT NULL DEFAULT ({now}),
            updated_at TEXT NOT NULL DEFAULT ({now}), metadata {json_type},
            PRIMARY KEY (name, scope, run_id))""",
        f"""CREATE TABLE IF NOT EXISTS {p}agent_segments (
            id {serial}, agent_name TEXT NOT NULL, run_id TEXT NOT NULL DEFAULT '',
            scope TEXT NOT NULL, segment_number INTEGER NOT NULL,
            timestamp TEXT NOT NULL DEFAULT ({now}), prompt TEXT, summary TEXT,
            metadata {json_type}, UNIQUE (agent_name, scope, run_id, segment_number))""",
        f"""CREATE TABLE IF NOT EXISTS {p}imports (
            alias TEXT NOT NULL, run_id TEXT NOT NULL, source_url TEXT NOT NULL,
            fetched_at TEXT, inputs_schema {json_type}, outputs_schema {json_type},
            content_hash TEXT, metadata {json_type}, PRIMARY KEY (alias, run_id))""",
        f"""CREATE TABLE IF NOT EXISTS {p}journal (
            seq {serial}, run_id TEXT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL,
            body TEXT NOT NULL)""",
        f"CREATE INDEX IF NOT EXISTS journal_run_seq ON {p}journal (run_id, seq)",
        f"""CREATE TABLE IF NOT EXISTS {p}frames (
            run_id TEXT NOT NULL, execution_id INTEGER NOT NULL, block TEXT NOT NULL,
            depth INTEGER NOT NULL, parent INTEGER, status TEXT NOT NULL, args TEXT,
            call_key TEXT, PRIMARY KEY (run_id, execution_id))""",
        f"""CREATE TABLE IF NOT EXISTS {p}capabilities (
            hash TEXT PRIMARY KEY, run_id TEXT NOT NULL, body TEXT NOT NULL)""",
    ]


# Columns added since the first release: PostgreSQL databases made before get them when
# opened (SQLite databases are migrated by sqlite_schema).
ADDED_COLUMNS = (("frames", "call_key", "TEXT"),)


class SqlBackend(Backend):
    """Shared SQL for both dialects; subclasses supply connections and placeholders."""

    prefix = ""

    def __init__(self, project_root: Path, home: Path) -> None:
        self.root = project_root
        self.home = home
        self.files = FilesystemBackend(project_root, home)  # run dirs, attachments, custom agents

    @abstractmethod
    @contextmanager
    def tx(self, run_id: str | None, *, durable: bool, scope: str = "run") -> Iterator[Cursor]:
        """A transaction on the database holding ``run_id``'s rows (or the agents' store)."""

    def q(self, sql: str) -> str:
        return sql.replace("{p}", self.prefix)

    @abstractmethod
    def fetch(self, run_id: str | None, sql: str, params: tuple[Any, ...] = (),
              scope: str = "run") -> list[tuple[Any, ...]]:
        """Rows of one query, read outside any write transaction."""

    def write(self, run_id: str | None, sql: str, params: tuple[Any, ...], *, durable: bool,
              scope: str = "run") -> None:
        """One statement as its own transaction."""
        with self.tx(run_id, durable=durable, scope=scope) as cur:
            cur.execute(self.q(sql), params)

    def write_all(self, run_id: str, parts: list[tuple[str, list[tuple[Any, ...]]]], *,
                  durable: bool) -> None:
        """Several statements, each with its rows, as one transaction."""
        with self.tx(run_id, durable=durable) as conn:
            cur = conn.cursor()
            for sql, rows in parts:
                if rows:
                    cur.executemany(self.q(sql), rows)

    # ------------------------------------------------------------------ runs
    def run_location(self, run_id: str) -> str:
        return self.files.run_location(run_id)

    INSERT_RUN = ("INSERT INTO {p}run (id, program_path, program_source, started_at,"
                  " updated_at, status, state_mode, metadata, vm_token_hash)"
                  " VALUES (?,?,?,?,?,?,?,?,?)")

    def _run_row(self, record: RunRecord) -> tuple[Any, ...]:
        return (record.id, record.program_path, record.program_source, record.started,
                record.updated, record.status, self.name, "{}", record.vm_token_hash)

    def create_run(self, record: RunRecord) -> None:
        if not (self.files.run_dir(record.id) / "program.prose").exists():
            self.files.build_run_dir(record.id, lambda directory: atomic_write(
                directory / "program.prose", record.program_source), "program.prose")
        self.write(record.id, self.INSERT_RUN, self._run_row(record), durable=True)

    def _record(self, row: tuple[Any, ...]) -> RunRecord:
        return RunRecord(row[0], row[1], row[2], row[5], row[3], row[4], row[6], row[7])

    RUN_COLUMNS = ("SELECT id, program_path, program_source, started_at, updated_at, status,"
                   " vm_token_hash, error FROM {p}run")

    def load_run(self, run_id: str) -> RunRecord:
        rows = self.fetch(run_id, self.RUN_COLUMNS + " WHERE id = ?", (run_id,))
        if not rows:
            raise RunNotFound(f"no run {run_id} in the {self.name} store")
        return self._record(rows[0])

    def list_agents(self, run_id: str) -> list[str]:
        rows = self.fetch(run_id, "SELECT name FROM {p}agents WHERE scope = 'execution' AND"
                          " run_id = ? UNION SELECT agent_name FROM {p}agent_segments WHERE"
                          " scope = 'execution' AND run_id = ?", (run_id, run_id))
        return sorted({r[0] for r in rows})

    def update_run(self, run_id: str, *, status: str, error: str | None) -> None:
        from openprose.state.store import _now

        self.write(run_id, "UPDATE {p}run SET status = ?, error = ?, updated_at = ? WHERE id = ?",
                   (status, error, _now(), run_id), durable=True)

    # ------------------------------------------------------------------ bindings
    def binding_location(self, run_id: str, ref: BindingRef) -> str:
        scope = f"execution_id={ref.execution_id}" if ref.execution_id else "execution_id=0"
        return f"{self.name}:{self.prefix}bindings WHERE run_id='{run_id}' AND " \
               f"name='{ref.name}' AND {scope}"

    def _binding_row(self, run_id: str, binding: Binding) -> tuple[Any, ...]:
        value, attachment = binding.value, None
        if len(value.encode()) > LARGE_VALUE:
            path = self.files.contained(self.files.run_dir(run_id) / "attachments") / \
                binding.ref.file_name
            atomic_write(path, value, durable=True)
            attachment = str(path.relative_to(self.files.run_dir(run_id)))
            value = f"(stored in {attachment}, {len(binding.value.encode())} bytes)"
        return (binding.name, run_id, binding.execution_id or ROOT, binding.kind, value,
                binding.source, attachment)

    UPSERT_BINDING = (
        "INSERT INTO {p}bindings (name, run_id, execution_id, kind, value, source_statement,"
        " attachment_path) VALUES (?,?,?,?,?,?,?) ON CONFLICT (run_id, name, execution_id)"
        " DO UPDATE SET kind = excluded.kind, value = excluded.value,"
        " source_statement = excluded.source_statement,"
        " attachment_path = excluded.attachment_path, updated_at = excluded.updated_at")

    def put_binding(self, run_id: str, binding: Binding, *, durable: bool) -> None:
        self.write(run_id, self.UPSERT_BINDING, self._binding_row(run_id, binding),
                   durable=durable)

    def _binding(self, run_id: str, row: tuple[Any, ...]) -> Binding:
        name, execution_id, kind, value, source, attachment = row
        if attachment:
            path = self.files.run_dir(run_id) / attachment
            self.files.contained(path.parent)  # the row names a file under attachments/
            try:
                value = read_exact(path)
            except FileNotFoundError:
                raise DamagedState(f"{path}: the attachment of binding '{name}' is "
                                   "missing") from None
        ref = BindingRef(name, execution_id or None)
        return Binding(name, execution_id or None, kind, source or "", value or "",
                       self.binding_location(run_id, ref))

    BINDING_COLUMNS = ("SELECT name, execution_id, kind, value, source_statement,"
                       " attachment_path FROM {p}bindings")

    def get_binding(self, run_id: str, ref: BindingRef) -> Binding | None:
        rows = self.fetch(run_id, self.BINDING_COLUMNS +
                          " WHERE run_id = ? AND name = ? AND execution_id = ?",
                          (run_id, ref.name, ref.eid))
        return self._binding(run_id, rows[0]) if rows else None

    def list_bindings(self, run_id: str) -> list[Binding]:
        rows = self.fetch(run_id, self.BINDING_COLUMNS +
                          " WHERE run_id = ? ORDER BY name, execution_id", (run_id,))
        return [self._binding(run_id, row) for row in rows]

    # ------------------------------------------------------------------ imports
    def put_import(self, run_id: str, record: ImportRecord) -> None:
        self.write(run_id,
                   "INSERT INTO {p}imports (alias, run_id, source_url, fetched_at, inputs_schema,"
                   " outputs_schema, content_hash) VALUES (?,?,?,?,?,?,?) ON CONFLICT (alias,"
                   " run_id) DO UPDATE SET source_url = excluded.source_url, fetched_at ="
                   " excluded.fetched_at, inputs_schema = excluded.inputs_schema,"
                   " outputs_schema = excluded.outputs_schema,"
                   " content_hash = excluded.content_hash",
                   (record.alias, run_id, record.source_url, record.fetched_at or None,
                    json.dumps(record.inputs), json.dumps(list(record.outputs)),
                    record.content_hash), durable=False)

    def list_imports(self, run_id: str) -> list[ImportRecord]:
        rows = self.fetch(run_id, "SELECT alias, source_url, content_hash, inputs_schema,"
                          " outputs_schema, fetched_at FROM {p}imports WHERE run_id = ?"
                          " ORDER BY alias", (run_id,))
        return [ImportRecord(r[0], r[1], r[2] or "", _json(r[3]) or {},
                             tuple(_json(r[4]) or ()), r[5] or "") for r in rows]

    # ------------------------------------------------------------------ journal
    INSERT_JOURNAL = "INSERT INTO {p}journal (run_id, key, kind, body) VALUES (?,?,?,?)"

    def append_journal(self, run_id: str, entry: JournalEntry, *, durable: bool) -> None:
        self.write(run_id, self.INSERT_JOURNAL, _journal_row(run_id, entry), durable=durable)

    def commit(self, run_id: str, steps: list[CommitStep]) -> None:
        # Two sessions of one binding may finish in one batch: the later value stands.
        latest = {s.binding.ref: s.binding for s in steps if not s.stored}
        # The result records carry kind and source, so repair can restore a lost row.
        entries = [replace(s.entry, meta={**s.entry.meta, "kind": s.binding.kind,
                                          "source": s.binding.source}) for s in steps]
        self.write_all(run_id, [
            (self.UPSERT_BINDING, [self._binding_row(run_id, b) for b in latest.values()]),
            (self.INSERT_JOURNAL, [_journal_row(run_id, e) for e in entries]),
            (self.UPSERT_CAPABILITY, [_grant_row(run_id, s.ended_grant) for s in steps]),
        ], durable=True)

    def start_sessions(self, run_id: str, intents: list[JournalEntry],
                       grants: list[dict[str, Any]]) -> None:
        self.write_all(run_id, [
            (self.INSERT_JOURNAL, [_journal_row(run_id, e) for e in intents]),
            (self.UPSERT_CAPABILITY, [_grant_row(run_id, g) for g in grants]),
        ], durable=False)

    def read_journal(self, run_id: str) -> list[JournalEntry]:
        rows = self.fetch(run_id, "SELECT seq, body FROM {p}journal WHERE run_id = ?"
                          " ORDER BY seq", (run_id,))
        where = self.table_location(run_id, "journal")
        return [entry_from_json(body, f"{where}, row seq={seq}") for seq, body in rows]

    def table_location(self, run_id: str, table: str) -> str:
        """Where a table's rows of this run are, for error messages."""
        return f"{self.name} table {self.prefix}{table} of run {run_id}"

    def repair(self, run_id: str) -> None:
        """Restore binding rows deleted since their session's result was recorded: the
        result in the journal carries the value (as the filesystem backend restores a
        deleted binding file)."""
        results: dict[BindingRef, JournalEntry] = {}
        for entry in self.read_journal(run_id):
            if entry.kind == "result" and entry.binding is not None and \
                    entry.value is not None and entry.status == "completed":
                results[entry.binding] = entry
        if not results:
            return
        present = {BindingRef(name, eid or None) for name, eid in self.fetch(
            run_id, "SELECT name, execution_id FROM {p}bindings WHERE run_id = ?", (run_id,))}
        lost = [Binding(ref.name, ref.execution_id, entry.meta.get("kind") or "let",
                        entry.meta.get("source") or "", str(entry.value))
                for ref, entry in results.items() if ref not in present]
        if lost:
            self.write_all(run_id, [(self.UPSERT_BINDING,
                                     [self._binding_row(run_id, b) for b in lost])],
                           durable=True)

    # ------------------------------------------------------------------ frames, capabilities
    def put_frame(self, run_id: str, frame: Frame) -> None:
        self.write(run_id,
                   "INSERT INTO {p}frames (run_id, execution_id, block, depth, parent, status,"
                   " args, call_key) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT (run_id,"
                   " execution_id) DO UPDATE SET status = excluded.status",
                   (run_id, frame.execution_id, frame.block, frame.depth, frame.parent,
                    frame.status, json.dumps(frame.args), frame.key), durable=False)

    def list_frames(self, run_id: str) -> list[Frame]:
        rows = self.fetch(run_id, "SELECT execution_id, block, depth, parent, status, args,"
                          " call_key FROM {p}frames WHERE run_id = ?", (run_id,))
        where = self.table_location(run_id, "frames")
        return [frame_from_data({"execution_id": r[0], "block": r[1], "depth": r[2],
                                 "parent": r[3], "status": r[4],
                                 "args": parse_json(r[5] or "{}", where, "frame args"),
                                 "key": r[6]},
                                f"{where}, execution_id={r[0]}") for r in rows]

    UPSERT_CAPABILITY = ("INSERT INTO {p}capabilities (hash, run_id, body) VALUES (?,?,?)"
                         " ON CONFLICT (hash) DO UPDATE SET body = excluded.body")

    def put_capability(self, run_id: str, grant: dict[str, Any]) -> None:
        self.write(run_id, self.UPSERT_CAPABILITY, _grant_row(run_id, grant), durable=False)

    def list_capabilities(self, run_id: str) -> list[dict[str, Any]]:
        rows = self.fetch(run_id, "SELECT body FROM {p}capabilities WHERE run_id = ?",
                          (run_id,))
        where = self.table_location(run_id, "capabilities")
        return [_grant(row[0], where) for row in rows]

    # ------------------------------------------------------------------ agents
    def _agent_key(self, run_id: str, agent: AgentRef) -> tuple[str, str, str, str]:
        check_name(agent.name, "agent name")
        owner = run_id.split("/imports/")[0] if agent.scope == "execution" else ""
        store = {"execution": "run", "project": "project", "user": "user"}[agent.scope]
        return agent.name, agent.scope, owner, store

    def memory_location(self, run_id: str, agent: AgentRef) -> str:
        if agent.scope == "custom":
            return self.files.memory_location(run_id, agent)
        name, scope, owner, _ = self._agent_key(run_id, agent)
        return f"{self.name}:{self.prefix}agents WHERE name='{name}' AND scope='{scope}'" \
               f" AND run_id='{owner}'"

    def segment_location(self, run_id: str, agent: AgentRef, number: int) -> str:
        if agent.scope == "custom":
            return self.files.segment_location(run_id, agent, number)
        name, scope, owner, _ = self._agent_key(run_id, agent)
        return f"{self.name}:{self.prefix}agent_segments WHERE agent_name='{name}' AND " \
               f"scope='{scope}' AND run_id='{owner}' AND segment_number={number}"

    def read_memory(self, run_id: str, agent: AgentRef) -> str | None:
        if agent.scope == "custom":
            return self.files.read_memory(run_id, agent)
        name, scope, owner, store = self._agent_key(run_id, agent)
        rows = self.fetch(owner or run_id, "SELECT memory FROM {p}agents WHERE name = ? AND"
                          " scope = ? AND run_id = ?", (name, scope, owner), scope=store)
        return rows[0][0] if rows else None

    def write_memory(self, run_id: str, agent: AgentRef, text: str) -> None:
        if agent.scope == "custom":
            self.files.write_memory(run_id, agent, text)
            return
        name, scope, owner, store = self._agent_key(run_id, agent)
        self.write(owner or run_id,
                   "INSERT INTO {p}agents (name, run_id, scope, memory) VALUES (?,?,?,?)"
                   " ON CONFLICT (name, scope, run_id) DO UPDATE SET memory = excluded.memory,"
                   " updated_at = excluded.updated_at", (name, owner, scope, text),
                   durable=True, scope=store)

    LAST_SEGMENT = ("SELECT COALESCE(MAX(segment_number), 0) FROM {p}agent_segments WHERE"
                    " agent_name = ? AND scope = ? AND run_id = ?")
    # Serializes appends to one agent's segments where the transaction alone does not.
    SEGMENT_LOCK: str | None = None

    def next_segment(self, run_id: str, agent: AgentRef) -> int:
        if agent.scope == "custom":
            return self.files.next_segment(run_id, agent)
        name, scope, owner, store = self._agent_key(run_id, agent)
        rows = self.fetch(owner or run_id, self.LAST_SEGMENT, (name, scope, owner), scope=store)
        return int(rows[0][0]) + 1

    def append_segment(self, run_id: str, agent: AgentRef, text: str) -> int:
        if agent.scope == "custom":
            return self.files.append_segment(run_id, agent, text)
        name, scope, owner, store = self._agent_key(run_id, agent)
        with self.tx(owner or run_id, durable=True, scope=store) as cur:
            if self.SEGMENT_LOCK:
                cur.execute(self.q(self.SEGMENT_LOCK), (f"{self.prefix}{scope}/{owner}/{name}",))
            row = cur.execute(self.q(self.LAST_SEGMENT), (name, scope, owner)).fetchone()
            number = int(row[0]) + 1
            cur.execute(self.q(
                "INSERT INTO {p}agent_segments (agent_name, run_id, scope, segment_number,"
                " summary) VALUES (?,?,?,?,?)"), (name, owner, scope, number, text))
        return number

    def list_segments(self, run_id: str, agent: AgentRef) -> list[tuple[int, str]]:
        if agent.scope == "custom":
            return self.files.list_segments(run_id, agent)
        name, scope, owner, store = self._agent_key(run_id, agent)
        rows = self.fetch(owner or run_id, "SELECT segment_number, summary FROM"
                          " {p}agent_segments WHERE agent_name = ? AND scope = ? AND"
                          " run_id = ? ORDER BY segment_number", (name, scope, owner),
                          scope=store)
        return [(int(r[0]), r[1] or "") for r in rows]

    # ------------------------------------------------------------------ state
    def write_state(self, run_id: str, text: str, snapshot: StateSnapshot) -> None:
        with self.tx(run_id, durable=False) as cur:
            cur.execute(self.q("UPDATE {p}run SET state_md = ? WHERE id = ?"), (text, run_id))
            for status in snapshot.statuses:
                cur.execute(self.q(
                    "INSERT INTO {p}execution (run_id, statement_index, status, metadata)"
                    " VALUES (?,?,?,?) ON CONFLICT (run_id, statement_index) DO UPDATE SET"
                    " status = excluded.status, metadata = excluded.metadata"),
                    (run_id, status.line, _execution_status(status.status),
                     json.dumps(asdict(status))))

    def read_state(self, run_id: str) -> str:
        rows = self.fetch(run_id, "SELECT state_md FROM {p}run WHERE id = ?", (run_id,))
        return (rows[0][0] or "") if rows else ""


def _journal_row(run_id: str, entry: JournalEntry) -> tuple[Any, ...]:
    return run_id, entry.key, entry.kind, entry_to_json(entry)


def _grant_row(run_id: str, grant: dict[str, Any]) -> tuple[Any, ...]:
    return grant["hash"], run_id, grant_to_json(grant)


def _grant(body: str, where: str) -> dict[str, Any]:
    return grant_from_data(parse_json(body, where, "session grant"), where)


def _json(value: Any) -> Any:
    """A JSON column: text in SQLite, already decoded in PostgreSQL."""
    return json.loads(value) if isinstance(value, str) else value


def _execution_status(status: str) -> str:
    return {"complete": "completed", "executing": "executing", "retrying": "executing",
            "failed": "failed", "cancelled": "skipped"}.get(status, "pending")


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
            if getattr(err, "sqlite_errorname", "") != "SQLITE_BUSY" or \
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
        self._writers: dict[Path, threading.Lock] = {}

    def db_path(self, run_id: str | None, scope: str) -> Path:
        if scope == "project":
            return self.root / ".prose" / "agents.db"
        if scope == "user":
            return self.home / ".prose" / "agents.db"
        assert run_id is not None
        return self.files.contained(self.files.run_dir(run_id)) / "state.db"

    def _connection(self, path: Path) -> sqlite3.Connection:
        cache: dict[Path, sqlite3.Connection] = self._local.__dict__.setdefault("conns", {})
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
        if self.files.run_dir(record.id).is_dir() and \
                (self.files.run_dir(record.id) / "state.db").exists():
            super().create_run(record)  # a database without a run row: the row goes in
            return

        def build(directory: Path) -> None:
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

    def _open(self, run_id: str | None, scope: str) -> sqlite3.Connection:
        path = self.db_path(run_id, scope)
        if scope == "run" and not path.exists() and not path.parent.is_dir():
            raise RunNotFound(f"no run {run_id} under {self.files.runs}")
        return self._connection(path)

    def fetch(self, run_id: str | None, sql: str, params: tuple[Any, ...] = (),
              scope: str = "run") -> list[tuple[Any, ...]]:
        conn = self._open(run_id, scope)
        with sqlite_errors(self.db_path(run_id, scope)):
            return conn.execute(self.q(sql), params).fetchall()

    @contextmanager
    def tx(self, run_id: str | None, *, durable: bool, scope: str = "run") -> Iterator[Cursor]:
        conn = self._open(run_id, scope)
        path = self.db_path(run_id, scope)
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
                except DamagedState as err:
                    found.append(damaged_record(path.parent.name, err))
        return found

    def list_children(self, run_id: str) -> list[str]:
        imports = self.files.run_dir(run_id) / "imports"
        return [f"{run_id}/imports/{p.parent.name}" for p in sorted(imports.glob("*/state.db"))]

    def delete_run(self, run_id: str, *, keep_shared: bool = False) -> None:
        directory = self.files.run_dir(run_id)
        self.load_run(run_id)  # RunNotFound unless this backend holds it
        with self._ready_lock:  # this process's connections to the run's databases
            inside = [(p, c) for p, c in self._all if p.is_relative_to(directory)]
            self._all = [(p, c) for p, c in self._all if not p.is_relative_to(directory)]
            self._ready -= {p for p, _ in inside}
            cache = self._local.__dict__.get("conns", {})
            for path, conn in inside:
                cache.pop(path, None)
                conn.close()
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
                return candidate, _grant(rows[0][0],
                                         self.table_location(candidate, "capabilities"))
        return None

    def close(self) -> None:
        """Close every thread's connections; the last one to close folds the WAL back into
        the database, so a finished run leaves only ``state.db``."""
        with self._ready_lock:
            connections, self._all = self._all, []
            self._local = threading.local()
        vacuumed: set[Path] = set()
        for path, conn in connections:
            if path not in vacuumed:
                vacuumed.add(path)
                conn.execute("PRAGMA busy_timeout = 0")
                # If another process is writing, the freed pages are simply reused later.
                with contextlib.suppress(sqlite3.Error):
                    conn.executescript("PRAGMA incremental_vacuum")
            conn.close()


class PostgresBackend(SqlBackend):
    """Every run in one PostgreSQL schema (default ``openprose``), through a connection pool.
    Non-durable transactions use ``synchronous_commit = off``; tables prefixed ``x_`` are
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
            raise BackendUnavailable(f"cannot connect to PostgreSQL at {_redact(url)}: "
                                     f"{reason}") from None
        if problem is not None:
            raise BackendUnavailable(f"cannot use PostgreSQL at {_redact(url)}: {problem}")
        self.pool = ConnectionPool(url, min_size=1, max_size=max_connections, open=False,
                                   kwargs={"autocommit": True})
        try:
            self.pool.open(wait=True, timeout=10)
        except Exception as err:
            self.pool.close()
            raise BackendUnavailable(f"cannot connect to PostgreSQL at {_redact(url)}: "
                                     f"{err}") from err
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
        self._psycopg = psycopg
        self._url = url

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
        # One autocommit round trip. The server's synchronous_commit stays on, so a write
        # that need not be durable costs the same flush a durable one does; that is cheaper
        # than the extra round trips of turning it off per transaction.
        with self.pool.connection() as conn:
            conn.execute(self.q(sql), params)

    def write_all(self, run_id: str, parts: list[tuple[str, list[tuple[Any, ...]]]], *,
                  durable: bool) -> None:
        """Every statement's rows as one multi-row VALUES list, and the statements as one
        statement of data-modifying CTEs: one round trip however many sessions start or
        finish together. (An upsert's rows must not repeat a key.)"""
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
        *first, last = statements
        ctes = ", ".join(f"s{i} AS ({sql})" for i, sql in enumerate(first))
        statement = (f"WITH {ctes} {last}" if ctes else last).replace("{p}", self.prefix)
        with self.pool.connection() as conn:  # numbered parameters: psycopg parses nothing
            self.raw_cursor(conn).execute(statement, params)

    def lock_driver(self, run_id: str, holder: DriverHolder) -> Callable[[], None]:
        """A session-level advisory lock on a connection of its own, held until released:
        PostgreSQL drops it when that connection ends, with the process or otherwise. Who
        holds it is recorded in the ``driver`` table for a refused driver to read."""
        key = driver_key(self.schema, run_id)
        try:
            conn = self._psycopg.connect(self._url, autocommit=True,
                                         application_name=f"openprose driver {run_id}")
        except self._psycopg.Error as err:
            raise BackendUnavailable(f"cannot connect to PostgreSQL at {_redact(self._url)}: "
                                     f"{err}") from err
        try:
            if not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
                rows = conn.execute(self.q("SELECT pid, host, since FROM {p}driver"
                                           " WHERE run_id = ?"), (run_id,)).fetchall()
                raise RunLocked(run_id, DriverHolder(*rows[0]) if rows else None)
            conn.execute(self.q("INSERT INTO {p}driver (run_id, pid, host, since)"
                                " VALUES (?,?,?,?) ON CONFLICT (run_id) DO UPDATE SET"
                                " pid = excluded.pid, host = excluded.host,"
                                " since = excluded.since"),
                         (run_id, holder.pid, holder.host, holder.since))
        except BaseException:
            conn.close()
            raise

        def release() -> None:
            with contextlib.suppress(self._psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            conn.close()

        return release

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
                          "journal", "frames", "capabilities", "driver"):
                conn.execute(self.q(f"DELETE FROM {{p}}{table} WHERE run_id = ? OR"
                                    " run_id LIKE ?"), (run_id, nested))
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
        return rows[0][0], _grant(rows[0][1], self.table_location(rows[0][0], "capabilities"))

    def close(self) -> None:
        self.pool.close()


# Who holds each run's driver lock (PostgreSQL only: the lock itself is advisory).
DRIVER_TABLE = ("CREATE TABLE IF NOT EXISTS {p}driver (run_id TEXT PRIMARY KEY,"
                " pid INTEGER NOT NULL, host TEXT NOT NULL, since TEXT NOT NULL)")


def driver_key(schema: str, run_id: str) -> int:
    """The advisory lock key of a run: 64 bits of a hash of schema and run id."""
    digest = hashlib.sha256(f"openprose-driver\0{schema}\0{run_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


# PostgreSQL takes at most 65,535 parameters in one statement.
MAX_PARAMETERS = 60_000


def _values_group(sql: str) -> str:
    start = sql.index("VALUES (") + len("VALUES ")
    return sql[start : sql.index(")", start) + 1]


def _numbered_values(sql: str, rows: int, first: int) -> str:
    """``INSERT ... VALUES (?,?)`` for ``rows`` rows, in PostgreSQL's numbered parameters
    from ``$first`` on."""
    group = _values_group(sql)
    width = group.count("?")
    numbered = ",".join("(" + ",".join(f"${first + row * width + column}"
                                       for column in range(width)) + ")"
                        for row in range(rows))
    return sql.replace(group, numbered, 1)


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


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':')[0]}:***@{host}"
    return url
