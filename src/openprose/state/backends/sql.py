"""What the SQL backends share: the tables, and every statement written once with ``?``
placeholders (:mod:`.sqlite` and :mod:`.postgres` supply connections and dialect). The tables
follow the seeds' schema with ``run_id`` columns; root scope is stored as execution_id 0
(ruling 4). Every write is one transaction; durable steps commit with a synchronous flush,
the rest (intents, grants, frames, state) do not.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Protocol

from openprose.state.backends.base import (
    LARGE_VALUE,
    Backend,
    CommitStep,
    entry_from_json,
    entry_to_json,
    grant_to_json,
)
from openprose.state.backends.filesystem import FilesystemBackend
from openprose.state.errors import (
    DamagedState,
    RunNotFound,
)
from openprose.state.files import atomic_write, read_exact
from openprose.state.models import (
    ROOT,
    AgentRef,
    Binding,
    BindingRef,
    Frame,
    ImportRecord,
    JournalEntry,
    StateSnapshot,
    utc_now,
)
from openprose.state.names import check_name
from openprose.state.records import (
    RunRecord,
    block_from_data,
    block_key,
    frame_from_data,
    grant_from_data,
    joined_grant,
    parse_json,
    split_grants,
)


class Cursor(Protocol):
    def execute(self, sql: str, params: tuple[Any, ...] = ...) -> Any: ...
    def cursor(self) -> Any: ...


def tables(p: str, serial: str, json_type: str, now: str) -> list[str]:
    return [
        f"""CREATE TABLE IF NOT EXISTS {p}run (
            id TEXT PRIMARY KEY, program_path TEXT, program_source TEXT,
            started_at TEXT NOT NULL, updated_at TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'running'
              CHECK (status IN ('queued', 'running', 'completed', 'failed', 'interrupted')),
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
        # The permissions blocks the run's grants name by key (each stored once per run).
        f"""CREATE TABLE IF NOT EXISTS {p}permissions (
            run_id TEXT NOT NULL, key TEXT NOT NULL, body TEXT NOT NULL,
            PRIMARY KEY (run_id, key))""",
    ]


class SqlBackend(Backend):
    """Shared SQL for both dialects; subclasses supply connections and placeholders."""

    prefix = ""

    def __init__(self, project_root: Path, home: Path) -> None:
        self.root = project_root
        self.home = home
        self.files = FilesystemBackend(project_root, home)  # run dirs, attachments, custom agents
        #: Per run, the permissions blocks known to be stored (key -> block).
        self._blocks: dict[str, dict[str, dict[str, Any]]] = {}

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
        self.write(run_id, "UPDATE {p}run SET status = ?, error = ?, updated_at = ? WHERE id = ?",
                   (status, error, utc_now(), run_id), durable=True)

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
        self.write_grants(run_id, [
            (self.UPSERT_BINDING, [self._binding_row(run_id, b) for b in latest.values()]),
            (self.INSERT_JOURNAL, [_journal_row(run_id, e) for e in entries]),
        ], [s.ended_grant for s in steps], durable=True)

    def start_sessions(self, run_id: str, intents: list[JournalEntry],
                       grants: list[dict[str, Any]]) -> None:
        self.write_grants(run_id, [
            (self.INSERT_JOURNAL, [_journal_row(run_id, e) for e in intents]),
        ], grants, durable=False)

    def write_grants(self, run_id: str, parts: list[tuple[str, list[tuple[Any, ...]]]],
                     grants: list[dict[str, Any]], *, durable: bool) -> None:
        """``parts`` and ``grants`` in one transaction, each grant naming its permissions
        block by key and the blocks not stored yet stored with them."""
        known = self._blocks.setdefault(run_id, {})
        stored, new = split_grants(grants, known)
        self.write_all(run_id, [*parts, (self.INSERT_PERMISSIONS, [
            (run_id, key, json.dumps(block, separators=(",", ":")))
            for key, block in new.items()]), (self.UPSERT_CAPABILITY, [
                (grant["hash"], run_id, grant_to_json(grant)) for grant in stored])],
            durable=durable)
        known.update(new)  # only once committed: a grant never names a block not yet there

    def read_journal(self, run_id: str) -> list[JournalEntry]:
        rows = self.fetch(run_id, "SELECT seq, body FROM {p}journal WHERE run_id = ?"
                          " ORDER BY seq", (run_id,))
        where = self.table_location(run_id, "journal")
        return [entry_from_json(body, f"{where}, row seq={seq}") for seq, body in rows]

    def table_location(self, run_id: str, table: str) -> str:
        """Where a table's rows of this run are, for error messages."""
        return f"{self.name} table {self.prefix}{table} of run {run_id}"

    def repair(self, run_id: str) -> list[JournalEntry]:
        """Restore binding rows deleted since their session's result was recorded: the
        result in the journal carries the value (as the filesystem backend restores a
        deleted binding file). Temp files a killed write left in the run's directory (its
        program copy, state.md, attachments) are swept. The journal read for it is
        returned."""
        self.files.sweep_temps(run_id)
        journal = self.read_journal(run_id)
        results: dict[BindingRef, JournalEntry] = {}
        for entry in journal:
            if entry.kind == "result" and entry.binding is not None and \
                    entry.value is not None and entry.status == "completed":
                results[entry.binding] = entry
        if not results:
            return journal
        present = {BindingRef(name, eid or None) for name, eid in self.fetch(
            run_id, "SELECT name, execution_id FROM {p}bindings WHERE run_id = ?", (run_id,))}
        lost = [Binding(ref.name, ref.execution_id, entry.meta.get("kind") or "let",
                        entry.meta.get("source") or "", str(entry.value))
                for ref, entry in results.items() if ref not in present]
        if lost:
            self.write_all(run_id, [(self.UPSERT_BINDING,
                                     [self._binding_row(run_id, b) for b in lost])],
                           durable=True)
        return journal

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
    INSERT_PERMISSIONS = ("INSERT INTO {p}permissions (run_id, key, body) VALUES (?,?,?)"
                          " ON CONFLICT (run_id, key) DO NOTHING")

    def put_capability(self, run_id: str, grant: dict[str, Any]) -> None:
        self.write_grants(run_id, [], [grant], durable=False)

    def list_capabilities(self, run_id: str) -> list[dict[str, Any]]:
        rows = self.fetch(run_id, "SELECT body FROM {p}capabilities WHERE run_id = ?",
                          (run_id,))
        where = self.table_location(run_id, "capabilities")
        return [self.grant_from_json(run_id, row[0], where) for row in rows]

    def grant_from_json(self, run_id: str, body: str, where: str) -> dict[str, Any]:
        """A stored grant of ``run_id`` read back whole, its permissions block in place."""
        grant = grant_from_data(parse_json(body, where, "session grant"), where)
        key = block_key(grant)
        known = self._blocks.setdefault(run_id, {})
        if key is not None and key not in known:
            found = f"{self.table_location(run_id, 'permissions')}, key={key}"
            for (text,) in self.fetch(run_id, "SELECT body FROM {p}permissions WHERE"
                                      " run_id = ? AND key = ?", (run_id, key)):
                block = parse_json(text, found, "permissions block")
                known.update([block_from_data({"key": key, "permissions": block}, found)])
        return joined_grant(grant, known, where)

    def release(self, run_id: str) -> None:
        for key in [k for k in self._blocks if k == run_id or k.startswith(f"{run_id}/")]:
            del self._blocks[key]

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
    UPDATE_STATE = "UPDATE {p}run SET state_md = ? WHERE id = ?"
    END_RUN = "UPDATE {p}run SET status = ?, error = ?, updated_at = ?, state_md = ? WHERE id = ?"
    UPSERT_EXECUTION = ("INSERT INTO {p}execution (run_id, statement_index, status, metadata)"
                        " VALUES (?,?,?,?) ON CONFLICT (run_id, statement_index) DO UPDATE SET"
                        " status = excluded.status, metadata = excluded.metadata")

    def write_state(self, run_id: str, text: str, snapshot: StateSnapshot) -> None:
        """state.md and the statements' statuses in one write (one round trip on
        PostgreSQL: it is made several times a run)."""
        self.write_all(run_id, [(self.UPDATE_STATE, [(text, run_id)]),
                                *self._statuses(run_id, snapshot)], durable=False)

    def _statuses(self, run_id: str, snapshot: StateSnapshot
                  ) -> list[tuple[str, list[tuple[Any, ...]]]]:
        return [(self.UPSERT_EXECUTION, [(run_id, status.line, _execution_status(status.status),
                                          json.dumps(asdict(status)))
                                         for status in snapshot.statuses])]

    def end_run(self, run_id: str, *, status: str, error: str | None, text: str,
                snapshot: StateSnapshot) -> None:
        self.write_all(run_id, [(self.END_RUN, [(status, error, utc_now(), text, run_id)]),
                                *self._statuses(run_id, snapshot)], durable=True)

    def write_digest(self, run_id: str, text: str) -> None:
        """Beside the attachments (read whole, never queried); not on a machine that does
        not have the run's directory (a replica of another host's run): a view there reads
        the journal."""
        if self.files.run_dir(run_id).is_dir():
            self.files.write_digest(run_id, text)

    def read_digest(self, run_id: str, start: int = 0, end: int | None = None
                    ) -> bytes | None:
        return self.files.read_digest(run_id, start, end)

    def read_state(self, run_id: str) -> str:
        rows = self.fetch(run_id, "SELECT state_md FROM {p}run WHERE id = ?", (run_id,))
        return (rows[0][0] or "") if rows else ""


def _journal_row(run_id: str, entry: JournalEntry) -> tuple[Any, ...]:
    return run_id, entry.key, entry.kind, entry_to_json(entry)


def _json(value: Any) -> Any:
    """A JSON column: text in SQLite, already decoded in PostgreSQL."""
    return json.loads(value) if isinstance(value, str) else value


def _execution_status(status: str) -> str:
    return {"complete": "completed", "executing": "executing", "retrying": "executing",
            "failed": "failed", "cancelled": "skipped"}.get(status, "pending")
