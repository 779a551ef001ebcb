"""The SQLite schema: created once per database and migrated with sqlite-utils, so a run made
by an older OpenProse opens in this one.

A database records its schema in ``PRAGMA user_version``. Version 0 is anything made before
the stamp: by an earlier openprose (already the full schema), or by the prompt-driven
OpenProse VM that kept ``state.db`` from its own, smaller schema (no journal, frames or
capabilities; a run row without its VM token hash; root bindings with a NULL execution id;
timestamps as ``YYYY-MM-DD HH:MM:SS``). Version 1 lacks the ``permissions`` table that
session grants name their permissions blocks in since version 2. Bringing a database to :data:`SCHEMA_VERSION` adds
what is missing and rewrites what the backend cannot read, in one transaction, and never
drops a row. Tables are created from the DDL the PostgreSQL backend shares (it carries the
CHECK constraints sqlite-utils cannot express); everything else goes through sqlite-utils'
introspection, ``add_column``, ``transform``, ``rename_table`` and ``create_index``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import sqlite_utils

from openprose.state.errors import StateError

SCHEMA_VERSION = 2

# The columns each table must have, with the declaration added to an older table that lacks
# one: (type, NOT NULL default or None).
COLUMNS: dict[str, dict[str, tuple[str, object]]] = {
    "run": {"program_path": ("TEXT", None), "program_source": ("TEXT", None),
            "state_mode": ("TEXT", "sqlite"), "metadata": ("TEXT", None),
            "vm_token_hash": ("TEXT", ""), "error": ("TEXT", None),
            "state_md": ("TEXT", None)},
    "execution": {"statement_text": ("TEXT", None), "started_at": ("TEXT", None),
                  "completed_at": ("TEXT", None), "error_message": ("TEXT", None),
                  "parent_id": ("INTEGER", None), "metadata": ("TEXT", None)},
    "bindings": {"value": ("TEXT", None), "source_statement": ("TEXT", None),
                 "attachment_path": ("TEXT", None), "metadata": ("TEXT", None)},
    "agents": {"memory": ("TEXT", None), "metadata": ("TEXT", None)},
    "agent_segments": {"scope": ("TEXT", "execution"), "prompt": ("TEXT", None),
                       "summary": ("TEXT", None), "metadata": ("TEXT", None)},
    "imports": {"fetched_at": ("TEXT", None), "inputs_schema": ("TEXT", None),
                "outputs_schema": ("TEXT", None), "content_hash": ("TEXT", None),
                "metadata": ("TEXT", None)},
    "frames": {"call_key": ("TEXT", None)},
}
# The unique keys the backend's upserts name in ON CONFLICT.
UNIQUE = {"run": ("id",), "execution": ("run_id", "statement_index"),
          "bindings": ("run_id", "name", "execution_id"),
          "agents": ("name", "scope", "run_id"),
          "agent_segments": ("agent_name", "scope", "run_id", "segment_number"),
          "imports": ("alias", "run_id"), "frames": ("run_id", "execution_id"),
          "capabilities": ("hash",)}
OLD_STAMP = "____-__-__ __:__:__"  # SQLite's CURRENT_TIMESTAMP, as LIKE pattern


def ensure_schema(conn: sqlite3.Connection, create_tables: Callable[[], list[str]]) -> None:
    """Bring the database on ``conn`` (autocommit mode) to :data:`SCHEMA_VERSION`.
    ``create_tables`` gives the CREATE statements of the current schema."""
    if _version(conn) == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")  # one process migrates; the others then find it done
    try:
        version = _version(conn)
        if version > SCHEMA_VERSION:
            raise StateError(f"this database has schema version {version}, made by a newer "
                             f"openprose (this one knows up to {SCHEMA_VERSION}); upgrade "
                             "openprose to open it")
        if version < SCHEMA_VERSION:
            _migrate(sqlite_utils.Database(conn), create_tables())
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _migrate(db: sqlite_utils.Database, ddl: list[str]) -> None:
    existing = set(db.table_names())
    for statement in ddl:  # new tables (and indexes) from the shared DDL
        db.execute(statement)
    for table, columns in COLUMNS.items():
        if table not in existing:
            continue
        present = db[table].columns_dict
        for name, (kind, default) in columns.items():
            if name not in present:
                db[table].add_column(name, kind, not_null_default=default)
    if "run" in existing:
        for column in ("started_at", "updated_at"):
            db.execute(f"UPDATE run SET {column} = replace({column}, ' ', 'T') || 'Z'"
                       f" WHERE {column} LIKE '{OLD_STAMP}'")
    if "bindings" in existing:
        _migrate_bindings(db, ddl)
    if "agents" in existing:
        _migrate_agents(db)
    for table, key in UNIQUE.items():
        if table in existing and not _has_unique(db, table, key):
            _add_unique(db, table, key, ddl)


def _migrate_bindings(db: sqlite_utils.Database, ddl: list[str]) -> None:
    """Root scope is execution id 0 (ruling 4), never NULL; and every binding kind the
    engine writes (param, anonymous) is allowed. A table that says otherwise is rebuilt
    from the current DDL with every row copied over."""
    table = db["bindings"]
    db.execute("UPDATE bindings SET execution_id = 0 WHERE execution_id IS NULL")
    if "CHECK" not in table.schema.upper() and "execution_id" in _not_null(table):
        return
    old = list(table.columns_dict)
    db.rename_table("bindings", "bindings_before_migration")
    _create(db, "bindings", ddl)
    shared = ", ".join(c for c in db["bindings"].columns_dict if c in old)
    db.execute(f"INSERT INTO bindings ({shared}) SELECT {shared} FROM "
               "bindings_before_migration")
    db["bindings_before_migration"].drop()


def _create(db: sqlite_utils.Database, table: str, ddl: list[str]) -> None:
    for statement in ddl:
        if f"EXISTS {table} (" in statement:
            db.execute(statement)


def _migrate_agents(db: sqlite_utils.Database) -> None:
    """Project and user agents are stored with run_id '' (NULL would defeat the key)."""
    db.execute("UPDATE agents SET run_id = '' WHERE run_id IS NULL")
    if "agent_segments" in db.table_names():
        db.execute("UPDATE agent_segments SET scope = 'project' WHERE run_id IS NULL")
        db.execute("UPDATE agent_segments SET run_id = '' WHERE run_id IS NULL")
    if set(db["agents"].pks) != set(UNIQUE["agents"]):
        db["agents"].transform(pk=UNIQUE["agents"], not_null={"name", "run_id", "scope"})


def _not_null(table: sqlite_utils.db.Table) -> set[str]:
    return {column.name for column in table.columns if column.notnull}


def _has_unique(db: sqlite_utils.Database, table: str, key: tuple[str, ...]) -> bool:
    wanted = set(key)
    if set(db[table].pks) == wanted:
        return True
    return any(index.unique and set(index.columns) == wanted for index in db[table].indexes)


def _add_unique(db: sqlite_utils.Database, table: str, key: tuple[str, ...],
                ddl: list[str]) -> None:
    """A unique index on ``key``. If an older VM wrote rows that repeat a key (a statement
    it recorded once per loop iteration, say), the table is kept whole as
    ``{table}_legacy`` and a new one takes its place."""
    try:
        db[table].create_index(key, index_name=f"{table}_{'_'.join(key)}_key", unique=True,
                               if_not_exists=True)
    except sqlite3.IntegrityError:
        legacy, n = f"{table}_legacy", 2
        while legacy in db.table_names():
            legacy, n = f"{table}_legacy_{n}", n + 1
        db.rename_table(table, legacy)
        _create(db, table, ddl)
