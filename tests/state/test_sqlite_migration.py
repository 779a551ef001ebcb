"""A SQLite run made by an older OpenProse opens in this one: the prompt-driven VM's own
schema (no journal, no VM token, NULL root scope, a CHECK on binding kinds, space-separated
timestamps, a statement recorded once per iteration) and this package's unstamped schema."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from openprose.cli import cli
from openprose.state import (
    AgentRef,
    BindingRef,
    SessionStart,
    StatementStatus,
    StateSnapshot,
    open_store,
)
from openprose.state.backends.sqlite_schema import SCHEMA_VERSION

RUN_ID = "20260103-143052-a7b3c9"
OLD_SCHEMA = """
CREATE TABLE run (id TEXT PRIMARY KEY, program_path TEXT, program_source TEXT,
  started_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
  updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
  status TEXT NOT NULL DEFAULT 'running'
    CHECK (status IN ('running', 'completed', 'failed', 'interrupted')),
  state_mode TEXT NOT NULL DEFAULT 'sqlite', metadata TEXT DEFAULT '{}');
CREATE TABLE execution (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL
  REFERENCES run(id) ON DELETE CASCADE, statement_index INTEGER NOT NULL, statement_text TEXT,
  status TEXT NOT NULL DEFAULT 'pending', started_at TEXT, completed_at TEXT,
  error_message TEXT, parent_id INTEGER, metadata TEXT DEFAULT '{}');
CREATE TABLE bindings (name TEXT NOT NULL, run_id TEXT NOT NULL REFERENCES run(id),
  execution_id INTEGER, kind TEXT NOT NULL CHECK (kind IN ('input', 'output', 'let', 'const')),
  value TEXT, source_statement TEXT, created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
  updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP, attachment_path TEXT,
  metadata TEXT DEFAULT '{}', PRIMARY KEY (name, run_id, execution_id));
CREATE TABLE agents (name TEXT NOT NULL, run_id TEXT, scope TEXT NOT NULL, memory TEXT,
  created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
  updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP, metadata TEXT DEFAULT '{}',
  PRIMARY KEY (name, run_id));
CREATE TABLE agent_segments (id INTEGER PRIMARY KEY AUTOINCREMENT, agent_name TEXT NOT NULL,
  run_id TEXT, segment_number INTEGER NOT NULL, timestamp TEXT NOT NULL DEFAULT
  CURRENT_TIMESTAMP, prompt TEXT, summary TEXT, metadata TEXT DEFAULT '{}');
INSERT INTO run (id, program_path, program_source, started_at, updated_at, status)
  VALUES ('20260103-143052-a7b3c9', 'research.prose',
          'let research = session "Collect facts"', '2026-01-03 14:30:52',
          '2026-01-03 14:31:40', 'completed');
INSERT INTO execution (run_id, statement_index, statement_text, status) VALUES
  ('20260103-143052-a7b3c9', 1, 'let research = session "Collect facts"', 'completed'),
  ('20260103-143052-a7b3c9', 2, 'session "Refine"', 'completed'),
  ('20260103-143052-a7b3c9', 2, 'session "Refine"', 'completed');
INSERT INTO bindings (name, run_id, execution_id, kind, value, source_statement) VALUES
  ('research', '20260103-143052-a7b3c9', NULL, 'let', 'tides follow the moon',
   'let research = session "Collect facts"'),
  ('result', '20260103-143052-a7b3c9', 43, 'let', 'a chunk', 'let result = session "Split"');
INSERT INTO agents (name, run_id, scope, memory) VALUES
  ('captain', '20260103-143052-a7b3c9', 'execution', 'I steer.');
INSERT INTO agent_segments (agent_name, run_id, segment_number, summary) VALUES
  ('captain', '20260103-143052-a7b3c9', 1, 'steered once');
"""


def old_run(root: Path) -> Path:
    path = root / ".prose" / "runs" / RUN_ID / "state.db"
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as conn:
        conn.executescript(OLD_SCHEMA)
    conn.close()
    return path


def prose(root: Path, *args: str):
    return CliRunner().invoke(cli, [*args, "--project", str(root)], catch_exceptions=False)


def test_a_run_of_the_older_schema_lists_shows_and_reads(tmp_path: Path) -> None:
    db = old_run(tmp_path)
    listed = prose(tmp_path, "runs", "--json", "--state", "sqlite")
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.stdout)["runs"]
    assert row["run_id"] == RUN_ID and row["status"] == "completed"
    assert row["started"] == "2026-01-03T14:30:52Z" and row["duration_s"] == 48

    shown = prose(tmp_path, "show", RUN_ID)
    assert shown.exit_code == 0, shown.output
    assert f"run {RUN_ID}  completed" in shown.stdout
    assert prose(tmp_path, "show", RUN_ID, "research").stdout == "tides follow the moon\n"

    with open_store(tmp_path, "sqlite") as store:
        run = store.open_run(RUN_ID)
        assert run.read_binding(BindingRef("research")).value == "tides follow the moon"
        assert run.read_binding(BindingRef("result", 43)).value == "a chunk"
        assert run.memory(AgentRef("captain", "execution")) == "I steer."
        assert run.segments(AgentRef("captain", "execution")) == [(1, "steered once")]
        # It takes new writes: a kind the old CHECK refused, a root binding's upsert,
        # state with its per-statement upsert.
        run.write_binding(BindingRef("topic"), "tides", "param", "param topic")
        run.write_binding(BindingRef("research"), "revised", "let", "let research = ...")
        run.update_state(StateSnapshot((StatementStatus(1, 1, "complete", "research"),)))
        run.update_state(StateSnapshot((StatementStatus(1, 1, "complete", "research"),)))
        assert run.read_binding(BindingRef("research")).value == "revised"

    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    # Nothing was dropped: the statement the older VM recorded twice is kept aside whole.
    assert conn.execute("SELECT count(*) FROM execution_legacy").fetchone()[0] == 3
    assert conn.execute("SELECT count(*) FROM execution").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM bindings WHERE execution_id IS NULL"
                        ).fetchone()[0] == 0
    assert {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            } >= {"journal", "frames", "capabilities"}
    conn.close()


def test_the_migration_runs_once_and_a_current_database_is_only_stamped(
        tmp_path: Path) -> None:
    with open_store(tmp_path, "sqlite") as store:
        run = store.create_run('let a = session "A"', "a.prose")
        run.finish("completed")
        run_id = run.id
    db = tmp_path / ".prose" / "runs" / run_id / "state.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 0")  # as this package left databases before
    before = conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
    conn.close()
    with open_store(tmp_path, "sqlite") as store:
        assert store.open_run(run_id).record.status == "completed"
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall() == before
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_a_database_from_a_newer_openprose_is_refused_clearly(tmp_path: Path) -> None:
    db = old_run(tmp_path)
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    result = prose(tmp_path, "show", RUN_ID, "--state", "sqlite")
    assert result.exit_code == 1
    assert "made by a newer openprose" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("copies", [2, 8])
def test_two_processes_opening_an_old_run_migrate_it_once(tmp_path: Path, copies: int) -> None:
    """Processes opening one store at once all succeed: the first converts the old database
    to WAL and migrates it, the others wait for it (journal_mode=WAL answers "database is
    locked" at once, without the busy timeout, while another connection holds a lock)."""
    import subprocess
    import sys

    db = old_run(tmp_path)
    # Each process imports first, then waits on its stdin: all open the store together.
    code = ("import sys; from openprose.state import open_store; sys.stdin.read(1); "
            "s = open_store(sys.argv[1], 'sqlite'); "
            f"print(s.open_run('{RUN_ID}').record.status); s.close()")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for _ in range(copies)]
    for proc in procs:
        proc.stdin.write("go")
        proc.stdin.flush()
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [out for out, _ in outputs] == ["completed\n"] * copies, outputs
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM bindings").fetchone()[0] == 2
    assert conn.execute("SELECT count(*) FROM execution_legacy").fetchone()[0] == 3
    conn.close()


def test_opening_waits_while_another_process_converts_the_database(tmp_path: Path) -> None:
    """While another connection holds the write lock of a database not yet in WAL mode
    (as a process converting or migrating it does), ``PRAGMA journal_mode = WAL`` fails at
    once with "database is locked", whatever the busy timeout: the open must wait instead."""
    import subprocess
    import sys

    db = old_run(tmp_path)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    # The opener says on stderr each time it tries to switch to WAL mode.
    code = ("import sqlite3, sys; from openprose.state import open_store; "
            "connect = sqlite3.connect\n"
            "def traced(*args, **kwargs):\n"
            "    conn = connect(*args, **kwargs)\n"
            "    conn.set_trace_callback(lambda sql: 'journal_mode' in sql and print("
            "'journal_mode', file=sys.stderr, flush=True))\n"
            "    return conn\n"
            "sqlite3.connect = traced; print('ready', flush=True)\n"
            "s = open_store(sys.argv[1], 'sqlite'); "
            f"print(s.open_run('{RUN_ID}').record.status); s.close()")
    opener = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert opener.stdout.readline() == "ready\n"
        # A second try means the first met the lock and the opener waits; one that gives up
        # at once has ended instead (its stderr ends before a second try).
        for _ in range(2):
            if opener.stderr.readline() != "journal_mode\n":
                break
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        out, err = opener.communicate(timeout=120)
    assert out == "completed\n", err


def test_a_version_1_database_gets_the_permissions_table_and_its_grants_still_read(
        tmp_path: Path) -> None:
    """Version 1 had no ``permissions`` table: its grants carry their whole block. Opened
    now, those grants read as they were, and new grants name their block in the new table."""
    with open_store(tmp_path, "sqlite") as store:
        run = store.create_run('let a = session "A"', "a.prose")
        run_id = run.id
    db = tmp_path / ".prose" / "runs" / run_id / "state.db"
    block = {"read": ["old/**"], "write": [], "execute": [], "bash": "deny",
             "network": "prompt", "never": [".prose/"]}
    old = {"hash": "a" * 64, "name": "a", "execution_id": None, "kind": "let", "source": "",
           "alive": True, "context": [], "agent": None,
           "work": {"agent": "w", "key": "0", "line": 1, "permissions": block}}
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE permissions")
    conn.execute("INSERT INTO capabilities VALUES (?, ?, ?)",
                 (old["hash"], run_id, json.dumps(old)))
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with open_store(tmp_path, "sqlite") as store:
        assert store.grant("a" * 64, fresh=True)[1]["work"]["permissions"] == block
        start = SessionStart("1", "h", BindingRef("b"), "let", "let b = session",
                             work={"agent": "w", "key": "1", "line": 2, "permissions": block})
        token = store.open_run(run_id).start_sessions([start])[0].token
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("SELECT count(*) FROM permissions").fetchone()[0] == 1
    assert all("old/**" not in body for (body,) in conn.execute(
        "SELECT body FROM capabilities WHERE hash != ?", ("a" * 64,)))
    conn.close()
    with open_store(tmp_path, "sqlite") as store:
        assert store.token_grant(token)[1]["work"]["permissions"] == block
