"""The filesystem backend's layout and crash repair: binding files, segment files, the
journal, state.md, and the project's ``.prose/.env``."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from openprose.state import (
    AgentRef,
    BackendUnavailable,
    BindingRef,
    CapabilityError,
    StateDiskFull,
    StatementStatus,
    StateSnapshot,
    open_store,
    read_env_file,
)
from openprose.state.config import postgres_url

SOURCE = 'let research = session "Research {topic}"\n  context: topic'


def complete(store, run, ref: BindingRef, value: str, key: str, kind: str = "let",
             source: str = SOURCE, agent: AgentRef | None = None):
    grant = run.grant_session(ref, kind, source, agent=agent)
    handle = store.session(grant.token)
    handle.write_output(value)
    run.complete_session(grant.token, key)
    return grant


def read(path: Path) -> str:
    with open(path, encoding="utf-8", newline="") as handle:
        return handle.read()


# ---------------------------------------------------------------------------- layout

def test_binding_files_have_the_documented_format(fs_stores, program):
    store = fs_stores.open()
    run = store.create_run(program)
    for _ in range(3):
        frame = run.push_frame("process")
    assert frame.execution_id == 3
    complete(store, run, BindingRef("research"), "AI safety covers\n---\nmany areas", "1:r")
    complete(store, run, BindingRef("result", 3), "Processed chunk", "2:r", kind="output",
             source='output result = session "Process chunk"')
    run.write_binding(BindingRef(run.next_anonymous()), "anonymous output", "anonymous",
                      'session "Analyze the codebase"')

    bindings = Path(run.location) / "bindings"
    assert sorted(p.name for p in bindings.iterdir()) == [
        "anon_001.md", "research.md", "result__3.md"]
    assert read(bindings / "research.md") == (
        "# research\n\nkind: let\n\nsource:\n```prose\n"
        'let research = session "Research {topic}"\n  context: topic\n'
        "```\n\n---\n\nAI safety covers\n---\nmany areas")
    assert read(bindings / "result__3.md") == (
        "# result\n\nkind: output\nexecution_id: 3\n\nsource:\n```prose\n"
        'output result = session "Process chunk"\n'
        "```\n\n---\n\nProcessed chunk")
    assert read(bindings / "anon_001.md").startswith("# anon_001\n\nkind: anonymous\n\n")


def test_run_directory_layout(fs_stores, program):
    store = fs_stores.open()
    run = store.create_run(program, "main.prose")
    root = fs_stores.root.resolve()
    complete(store, run, BindingRef("research"), "r", "1:r",
             agent=AgentRef("captain", "execution"))
    grant = run.grant_session(BindingRef("review"), "let", "resume: captain",
                              agent=AgentRef("captain", "execution"))
    store.session(grant.token).write_memory("m")
    store.session(grant.token).append_segment("s")
    run.complete_session(grant.token, "2:review", value="ok")
    for scope in ("project", "user"):
        g = run.grant_session(BindingRef(scope), "let", "s", agent=AgentRef("keeper", scope))
        store.session(g.token).write_memory(scope)
        run.complete_session(g.token, f"3:{scope}", value="ok")
    run.child("alice", "research", "output x = 1\n")
    run.update_state(StateSnapshot())

    run_dir = root / ".prose" / "runs" / run.id
    assert Path(run.location) == run_dir
    names = {p.name for p in run_dir.iterdir()}
    assert {"program.prose", "state.md", "bindings", "imports", "agents"} <= names
    assert (run_dir / "agents" / "captain" / "memory.md").read_text() == "m"
    assert (run_dir / "agents" / "captain" / "captain-001.md").read_text() == "s"
    assert (run_dir / "imports" / "alice--research" / "program.prose").is_file()
    assert (root / ".prose" / "agents" / "keeper" / "memory.md").read_text() == "project"
    assert (fs_stores.home / ".prose" / "agents" / "keeper" / "memory.md").read_text() == \
        "user"
    leftovers = [p for p in (root / ".prose").rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []  # every write went through a temp file and a rename


# ---------------------------------------------------------------------------- segments

def test_segment_files_are_numbered_with_three_then_four_digits(fs_stores, program):
    store = fs_stores.open()
    agent = AgentRef("captain", "project")
    directory = fs_stores.root / ".prose" / "agents" / "captain"
    run = store.create_run(program)
    grant = run.grant_session(BindingRef("first"), "let", "s", agent=agent)
    assert grant.segment_location == ".prose/agents/captain/captain-001.md"
    assert store.session(grant.token).append_segment("one") == 1
    run.complete_session(grant.token, "0:first", value="v")
    assert (directory / "captain-001.md").read_text() == "one"

    for number in range(2, 1000):  # a long-lived agent: 999 segments so far
        (directory / f"captain-{number:03d}.md").write_text(f"segment {number}")
    again = fs_stores.open()
    later = again.create_run(program)
    grant = later.grant_session(BindingRef("later"), "let", "s", agent=agent)
    assert grant.segment_location == ".prose/agents/captain/captain-1000.md"
    handle = again.session(grant.token)
    assert handle.append_segment("the thousandth") == 1000
    assert handle.append_segment("and one more") == 1001
    assert (directory / "captain-1000.md").read_text() == "the thousandth"
    assert (directory / "captain-1001.md").read_text() == "and one more"
    segments = later.segments(agent)
    assert [n for n, _ in segments] == list(range(1, 1002))
    assert segments[998] == (999, "segment 999")
    assert segments[-1] == (1001, "and one more")


# ---------------------------------------------------------------------------- crash repair

def test_a_torn_last_journal_line_is_ignored_and_later_records_survive(fs_stores, program):
    store = fs_stores.open()
    run = store.create_run(program)
    complete(store, run, BindingRef("research"), "findings", "1:research")
    run.push_frame("block")
    live = run.grant_session(BindingRef("draft"), "let", "s")
    store.close()
    run_dir = Path(run.location)
    for log in ("journal.jsonl", "frames.jsonl", "capabilities.jsonl"):
        with open(run_dir / log, "a", encoding="utf-8") as handle:
            handle.write('{"key": "9:torn", "kind": "res')  # the crash cut this line short

    store = fs_stores.open()
    again = store.open_run(run.id)
    assert again.journal("1:research").value == "findings"
    assert again.journal("9:torn") is None
    assert again.read_binding(BindingRef("research")).value == "findings"
    assert [f.execution_id for f in again.frames()] == [1]
    # the run goes on: new records after the torn line must not be lost
    again.record_result("2:next", value="after the crash")
    again.push_frame("block")
    store.session(live.token).write_output("draft text")
    again.complete_session(live.token, "3:draft")
    store.close()

    final = fs_stores.open().open_run(run.id)
    assert final.journal("2:next").value == "after the crash"
    assert final.journal("3:draft").value == "draft text"
    assert [f.execution_id for f in final.frames()] == [1, 2]
    assert final.read_binding(BindingRef("draft")).value == "draft text"
    with pytest.raises(CapabilityError):
        fs_stores.open().session(live.token)


def corrupt(original: str, how: str, scoped: bool) -> str:
    """What a crash or a stray edit might leave of ``original``."""
    def cut(marker: str, extra: int = 0) -> str:
        return original[: original.index(marker) + len(marker) + extra]

    return {
        "empty": "",
        "garbage": "not a binding file at all\n",
        "cut in the header": cut("kind: ", 1),
        "cut after a field name": cut("execution_id: " if scoped else "source:\n"),
        "cut in the source": cut("let resea"),
        "cut in the value": cut("\n---\n\n", 7),
    }[how]


@pytest.mark.parametrize("how", ["deleted", "empty", "garbage", "cut in the header",
                                 "cut after a field name", "cut in the source",
                                 "cut in the value"])
@pytest.mark.parametrize("scoped", [False, True], ids=["root", "scoped"])
def test_a_lost_or_torn_binding_file_is_restored_from_the_journal(fs_stores, program, how,
                                                                  scoped):
    store = fs_stores.open()
    run = store.create_run(program)
    eid = run.push_frame("block").execution_id if scoped else None
    ref = BindingRef("research", eid)
    value = "the whole value\r\nwith two lines"
    complete(store, run, ref, value, "1:research", kind="output")
    path = Path(run.location) / "bindings" / ref.file_name
    original = read(path)
    store.close()

    if how == "deleted":
        path.unlink()
    else:
        path.write_text(corrupt(original, how, scoped), encoding="utf-8")

    again = fs_stores.open().open_run(run.id)
    restored = again.read_binding(ref)
    assert (restored.kind, restored.source, restored.value) == ("output", SOURCE, value)
    assert read(path) == original


def test_repair_keeps_a_binding_the_vm_rewrote(fs_stores, program):
    store = fs_stores.open()
    run = store.create_run(program)
    complete(store, run, BindingRef("report"), "first draft", "1:report")
    run.write_binding(BindingRef("report"), "final text", "output", "report = edited")
    store.close()
    again = fs_stores.open().open_run(run.id)
    assert again.read_binding(BindingRef("report")).value == "final text"
    assert read(Path(run.location) / "bindings" / "report.md").endswith("final text")


def test_the_latest_result_wins_when_a_binding_was_produced_twice(fs_stores, program):
    store = fs_stores.open()
    run = store.create_run(program)
    complete(store, run, BindingRef("item"), "iteration 1", "1:item#1")
    complete(store, run, BindingRef("item"), "iteration 2", "1:item#2")
    path = Path(run.location) / "bindings" / "item.md"
    store.close()
    path.write_text(read(path).replace("iteration 2", "iteration 1"), encoding="utf-8")
    assert fs_stores.open().open_run(run.id).read_binding(BindingRef("item")).value == \
        "iteration 2"


def test_journal_lines_are_compact_json(fs_stores, program):
    store = fs_stores.open()
    run = store.create_run(program)
    complete(store, run, BindingRef("research"), "v", "1:research")
    store.close()
    lines = (Path(run.location) / "journal.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    results = [r for r in records if r.get("kind") == "result"]
    assert results and results[-1]["key"] == "1:research"
    assert results[-1]["value"] == "v"
    assert all(": " not in line.split('"value"')[0] for line in lines)


# ---------------------------------------------------------------------------- state.md

TRACE = """\
agent captain:
  model: opus
let research = session "Research"
let notes = session "Notes"
parallel:
  a = session "A"
  b = session "B"
loop until **done** (max: 3):
  session "Synthesize"
resume: captain
  prompt: "Review"
let l12 = 12
let l13 = 13
let l14 = 14
let l15 = 15
let l16 = 16
let l17 = 17
let l18 = 18
let l19 = 19
let l20 = 20
"""


def test_state_md_shows_the_trace_index_and_call_stack(fs_stores):
    store = fs_stores.open()
    run = store.create_run(TRACE, "trace.prose")
    complete(store, run, BindingRef("research"), "r", "3:research")
    outer = run.push_frame("process")
    inner = run.push_frame("process", parent=outer.execution_id)
    done = run.push_frame("helper", parent=outer.execution_id)
    run.pop_frame(done.execution_id)
    run.write_binding(BindingRef("result", inner.execution_id), "x", "let", "let result = 1")
    grant = run.grant_session(BindingRef("review"), "let", "resume: captain",
                              agent=AgentRef("captain", "execution"))
    store.session(grant.token).write_memory("m")
    run.update_state(StateSnapshot(
        statuses=(
            StatementStatus(3, 3, "complete", "research.md"),
            StatementStatus(4, 4, "complete"),
            StatementStatus(6, 6, "executing"),
            StatementStatus(7, 7, "retrying", attempt=2, max_attempts=3),
            StatementStatus(8, 9, "not_entered"),
            StatementStatus(10, 11, "next"),
        ),
        active=("### Parallel (lines 5-7)", "- a: executing", "- b: retrying"),
    ))
    text = (Path(run.location) / "state.md").read_text(encoding="utf-8")
    assert text == run.state_text()
    lines = text.split("\n")
    assert lines[0] == "# Execution State"
    assert f"run: {run.id}" in lines and "program: trace.prose" in lines
    assert any(line.startswith("started: ") for line in lines)
    assert any(line.startswith("updated: ") for line in lines)

    def annotated(code: str) -> str:
        found = [line for line in lines if line.startswith(code)]
        assert len(found) == 1, (code, found)
        return found[0][len(code):].strip()

    assert annotated('let research = session "Research"') == \
        "# --> bindings/research.md (complete)"
    assert annotated('let notes = session "Notes"') == "# (complete)"
    assert annotated('  a = session "A"') == "# <-- EXECUTING"
    assert annotated('  b = session "B"') == "# <-- RETRYING (attempt 2/3)"
    assert annotated("loop until **done** (max: 3):") == "# [not yet entered]"
    assert annotated("resume: captain") == "# [...next...]"
    assert annotated("agent captain:") == ""
    # about eight lines past the last active statement, then a note of what is left
    assert "let l15 = 15" in lines and "let l16 = 16" not in lines
    assert "# ... 5 more line(s)" in lines

    assert "## Active Constructs" in lines and "- b: retrying" in lines
    assert f"| research | let | .prose/runs/{run.id}/bindings/research.md | (root) |" in lines
    assert (f"| result | let | .prose/runs/{run.id}/bindings/result__{inner.execution_id}.md"
            f" | {inner.execution_id} |") in lines
    assert "### Agents" in lines
    agent_rows = [line for line in lines if line.startswith("| captain | execution |")]
    assert len(agent_rows) == 1 and "agents/captain" in agent_rows[0]

    stack = lines[lines.index("## Call Stack"):]
    assert f"| {inner.execution_id} | process | 2 | executing |" in stack
    assert f"| {outer.execution_id} | process | 1 | waiting |" in stack
    assert not any(f"| {done.execution_id} | helper |" in line for line in stack)


# ---------------------------------------------------------------------------- .prose/.env

def test_env_file_is_read(tmp_path):
    assert read_env_file(tmp_path) == {}
    (tmp_path / ".prose").mkdir()
    (tmp_path / ".prose" / ".env").write_text(
        "# the project's settings\n\n"
        'OPENPROSE_POSTGRES_URL="postgresql://u@db:5432/prose"\n'
        "export TOKEN='single quoted'\n"
        "  SPACED =  padded value  \n"
        "EMPTY=\n"
        "NO_EQUALS_SIGN\n"
        "WITH_EQUALS=a=b\n", encoding="utf-8")
    assert read_env_file(tmp_path) == {
        "OPENPROSE_POSTGRES_URL": "postgresql://u@db:5432/prose",
        "TOKEN": "single quoted", "SPACED": "padded value", "EMPTY": "",
        "WITH_EQUALS": "a=b"}


def test_postgres_url_precedence(tmp_path):
    env = {"OPENPROSE_POSTGRES_URL": "from-env", "DATABASE_URL": "from-database-url"}
    assert postgres_url(tmp_path, {}) is None
    assert postgres_url(tmp_path, {"DATABASE_URL": "from-database-url"}) == "from-database-url"
    assert postgres_url(tmp_path, env) == "from-env"
    (tmp_path / ".prose").mkdir()
    (tmp_path / ".prose" / ".env").write_text("OPENPROSE_POSTGRES_URL=from-file\n")
    assert postgres_url(tmp_path, env) == "from-file"


def test_postgres_without_a_url_is_unavailable(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENPROSE_POSTGRES_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    with pytest.raises(BackendUnavailable, match="OPENPROSE_POSTGRES_URL"):
        open_store(tmp_path, "postgres", home=tmp_path / "home")
    with pytest.raises(ValueError, match="unknown state backend"):
        open_store(tmp_path, "mongodb")


def test_postgres_url_from_the_env_file(pg_stores, project, home, monkeypatch):
    monkeypatch.delenv("OPENPROSE_POSTGRES_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    (project / ".prose").mkdir()
    (project / ".prose" / ".env").write_text(f"OPENPROSE_POSTGRES_URL={pg_stores.url}\n")
    with open_store(project, "postgres", home=home, schema=pg_stores.schema) as store:
        run = store.create_run("output x = 1\n")
        run.write_binding(BindingRef("x"), "1", "output", "output x = 1")
    again = pg_stores.open()
    assert again.open_run(run.id).read_binding(BindingRef("x")).value == "1"


def test_postgres_leaves_extension_tables_alone(pg_stores, pg_admin, program):
    schema = pg_stores.schema
    store = pg_stores.open()
    pg_admin.execute(f'CREATE TABLE "{schema}".x_audit (note TEXT)')
    pg_admin.execute(f"INSERT INTO \"{schema}\".x_audit VALUES ('{uuid.uuid4().hex}')")
    run = store.create_run(program)
    complete(store, run, BindingRef("research"), "v", "1:r")
    pg_stores.open().open_run(run.id).finish("completed")
    assert pg_admin.execute(f'SELECT count(*) FROM "{schema}".x_audit') == [(1,)]
    tables = {row[0] for row in pg_admin.execute(
        f"SELECT table_name FROM information_schema.tables WHERE table_schema = '{schema}'")}
    assert {"run", "bindings", "journal", "agents", "agent_segments", "x_audit"} <= tables


def test_sqlite_uses_wal_and_a_busy_timeout(project, home, program):
    with open_store(project, "sqlite", home=home) as store:
        run = store.create_run(program)
        run.write_binding(BindingRef("x"), "1", "let", "let x = 1")
        assert store.backend.fetch(run.id, "PRAGMA journal_mode") == [("wal",)]
        assert store.backend.fetch(run.id, "PRAGMA busy_timeout")[0][0] >= 1000
        assert (Path(run.location) / "state.db").is_file()


def test_atomic_write_skips_a_temp_name_left_behind_and_leaves_no_temp(tmp_path, monkeypatch):
    import itertools
    import os

    from openprose.state import files

    monkeypatch.setattr(files, "_TEMP_NUMBERS", itertools.count(5))
    target = tmp_path / "bindings" / "x.md"
    target.parent.mkdir()
    stale = target.parent / f".x.md.{os.getpid()}-5.tmp"  # as a crashed process left it
    stale.write_text("stale")
    files.atomic_write(target, "new\r\nvalue ü", durable=True)
    assert target.read_bytes() == "new\r\nvalue ü".encode()
    assert stale.read_text() == "stale"
    assert sorted(p.name for p in target.parent.iterdir()) == [stale.name, "x.md"]
    files.atomic_write(tmp_path / "made" / "y.md", "y")
    assert (tmp_path / "made" / "y.md").read_text() == "y"


def test_atomic_write_that_fails_keeps_the_old_file_and_no_temp(tmp_path, monkeypatch):
    from openprose.state import files

    target = tmp_path / "x.md"
    target.write_text("old")

    def full_disk(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "write", full_disk)
    with pytest.raises(StateDiskFull, match="no space left"):
        files.atomic_write(target, "new")
    monkeypatch.undo()
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.md"]


def test_a_record_need_not_be_flushed_on_its_own(fs_stores, program, monkeypatch):
    from openprose.state.backends import filesystem

    store = fs_stores.open()
    run = store.create_run(program, "main.prose")
    run.record_result("2", status="completed", value="first")  # the journal exists now
    flushes: list[int] = []
    real_fsync = filesystem.os.fsync
    monkeypatch.setattr(filesystem.os, "fsync", lambda fd: flushes.append(fd) or real_fsync(fd))
    for i in range(50):
        run.record_result(f"3[{i}]", status="cancelled")
    assert flushes == []
    run.record_result("4", status="failed", error="boom")
    assert len(flushes) == 1  # and that one flush covers the fifty before it
    monkeypatch.undo()
    reopened = fs_stores.open().open_run(run.id)
    assert [reopened.journal(f"3[{i}]").status for i in range(50)] == ["cancelled"] * 50
