"""The run-state contract, on every backend: runs, bindings, scope, frames, sessions, agent
memory, large values, the durable journal, state.md, import runs and restarts."""

from __future__ import annotations

import re
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from openprose.state import (
    AgentRef,
    BindingRef,
    CapabilityError,
    DepthLimitExceeded,
    NotFoundError,
    RunNotFound,
    StateError,
    StatementStatus,
    StateSnapshot,
    StateStore,
    Usage,
    open_store,
)
from openprose.state.backends.base import LARGE_VALUE

RUN_ID = re.compile(r"^(\d{8}-\d{6})-[a-z0-9]{6}$")


def finish(store: StateStore, run, ref: BindingRef, value: str, key: str, *,
           kind: str = "let", source: str | None = None, usage: Usage | None = None):
    """Grant a session for ``ref``, let it write ``value`` itself, complete it."""
    grant = run.grant_session(ref, kind, source or f"let {ref.name} = session")
    store.session(grant.token).write_output(value)
    run.complete_session(grant.token, key, usage=usage)
    return grant


# ---------------------------------------------------------------------------- runs

def test_create_run_gives_a_timestamped_id_and_a_run_directory(stores, backend, program):
    store = stores.open()
    before = datetime.now(UTC).replace(microsecond=0)
    run = store.create_run(program, "main.prose")
    after = datetime.now(UTC)
    match = RUN_ID.match(run.id)
    assert match, run.id
    stamp = datetime.strptime(match.group(1), "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    assert before <= stamp <= after
    assert store.create_run(program).id != run.id

    run_dir = stores.root.resolve() / ".prose" / "runs" / run.id
    assert run.location == str(run_dir)
    assert (run_dir / "program.prose").read_text(encoding="utf-8") == program
    assert run.program_source == program
    assert run.program_path == "main.prose"
    assert run.status == "running"
    if backend == "filesystem":
        assert (run_dir / "bindings").is_dir()
    if backend == "sqlite":
        assert (run_dir / "state.db").is_file()
    assert isinstance(run.vm_token, str) and run.vm_token


def test_open_and_list_runs(stores, program):
    store = stores.open()
    first = store.create_run(program, "one.prose")
    second = store.create_run("output x = session \"x\"\n", None)
    first.child("alice", "research", "output y = session \"y\"\n")
    second.finish("failed", "boom")

    fresh = stores.open()
    listed = {info.id: info for info in fresh.list_runs()}
    assert set(listed) == {first.id, second.id}  # import runs are not top-level runs
    assert listed[first.id].status == "running"
    assert listed[first.id].program_path == "one.prose"
    assert listed[second.id].status == "failed"
    assert listed[second.id].program_path is None

    reopened = fresh.open_run(first.id)
    assert reopened.program_source == program
    assert reopened.status == "running"
    reopened.finish("completed")
    assert {i.id: i.status for i in stores.open().list_runs()}[first.id] == "completed"
    with pytest.raises(ValueError):
        reopened.finish("exploded")


def test_a_fresh_store_shares_the_backend_and_reads_runs_afresh(stores, program):
    store = stores.open()
    run_id = store.create_run(program, "one.prose").id
    assert store.open_run(run_id).status == "running"
    stores.open().open_run(run_id).finish("completed")  # another process drove it
    fresh = store.fresh()
    assert fresh.open_run(run_id).status == "completed"
    fresh.close()
    assert store.fresh().open_run(run_id).status == "completed"  # the backend is open


def test_open_run_of_an_unknown_id_raises_run_not_found(stores):
    store = stores.open()
    with pytest.raises(RunNotFound):
        store.open_run("20200101-000000-abcdef")
    assert store.list_runs() == []


def test_runs_of_another_backend_in_the_project_are_not_this_backends(stores, backend,
                                                                        program):
    other = "sqlite" if backend == "filesystem" else "filesystem"
    with open_store(stores.root, other, home=stores.home) as neighbour:
        foreign = neighbour.create_run(program)
    store = stores.open()
    with pytest.raises(RunNotFound):
        store.open_run(foreign.id)
    assert store.list_runs() == []
    mine = store.create_run(program)
    assert [info.id for info in stores.open().list_runs()] == [mine.id]


def test_list_runs_of_an_empty_project(stores):
    assert stores.open().list_runs() == []


def test_create_run_refuses_an_id_that_already_exists(stores, program):
    store = stores.open()
    run = store.create_run(program, run_id="20250102-030405-abc123")
    run.write_binding(BindingRef("topic"), "tides", "input", "input topic")
    with pytest.raises(StateError):
        store.create_run("output hijack = session \"x\"\n", run_id=run.id)
    fresh = stores.open()
    kept = fresh.open_run(run.id, vm_token=run.vm_token)  # the original capability still holds
    assert kept.program_source == program
    assert kept.read_binding(BindingRef("topic")).value == "tides"


# ---------------------------------------------------------------------------- bindings

def test_root_and_scoped_bindings_are_distinct(stores, backend, program):
    store = stores.open()
    run = store.create_run(program)
    frame = run.push_frame("process")
    eid = frame.execution_id
    run.write_binding(BindingRef("topic"), "root value", "input", 'input topic: "t"')
    run.write_binding(BindingRef("topic", eid), "scoped value", "let", "let topic = 1")

    for reader in (run, stores.open().open_run(run.id)):
        root = reader.read_binding(BindingRef("topic"))
        scoped = reader.read_binding(BindingRef("topic", eid))
        assert (root.name, root.execution_id, root.kind, root.source, root.value) == (
            "topic", None, "input", 'input topic: "t"', "root value")
        assert (scoped.name, scoped.execution_id, scoped.kind, scoped.source, scoped.value) == (
            "topic", eid, "let", "let topic = 1", "scoped value")
        assert sorted((b.name, b.execution_id or 0, b.value) for b in reader.bindings()) == [
            ("topic", 0, "root value"), ("topic", eid, "scoped value")]
    assert run.binding_index() == [(BindingRef("topic"), "input"),
                                   (BindingRef("topic", eid), "let")]

    root_loc = run.binding_location(BindingRef("topic"))
    scoped_loc = run.binding_location(BindingRef("topic", eid))
    assert root_loc != scoped_loc
    if backend == "filesystem":
        assert root_loc == f".prose/runs/{run.id}/bindings/topic.md"
        assert scoped_loc == f".prose/runs/{run.id}/bindings/topic__{eid}.md"
    else:
        assert "name='topic'" in root_loc and f"execution_id={eid}" in scoped_loc

    with pytest.raises(NotFoundError):
        run.read_binding(BindingRef("missing"))
    with pytest.raises(NotFoundError):
        run.read_binding(BindingRef("topic", eid + 1))


def test_rewriting_a_binding_replaces_its_value(stores, program):
    store = stores.open()
    run = store.create_run(program)
    run.write_binding(BindingRef("n"), "1", "let", "let n = 1")
    run.write_binding(BindingRef("n"), "2", "let", "n = 2")
    assert run.read_binding(BindingRef("n")).value == "2"
    assert run.read_binding(BindingRef("n")).source == "n = 2"
    assert [b.value for b in stores.open().open_run(run.id).bindings()] == ["2"]


TRICKY_VALUES = [
    "",
    "plain",
    "trailing newlines\n\n\n",
    "\nleading newline",
    "windows\r\nline\r\nendings\r\n",
    "old mac\rline",
    "a value with --- separators\n---\n\n---\n\nand ```fences```\n```\n\n---\n\n",
    "unicode: ünïcødé — 日本語 — 🚀",
    "# looks like a header\n\nkind: const\nexecution_id: 9\n",
]


@pytest.mark.parametrize("value", TRICKY_VALUES, ids=range(len(TRICKY_VALUES)))
def test_values_round_trip_exactly(stores, program, value):
    store = stores.open()
    run = store.create_run(program)
    frame = run.push_frame("block")
    run.write_binding(BindingRef("by_vm"), value, "let", "let by_vm = x")
    finish(store, run, BindingRef("by_session", frame.execution_id), value, "0:s")
    for reader in (run, stores.open().open_run(run.id)):
        assert reader.read_binding(BindingRef("by_vm")).value == value
        assert reader.read_binding(BindingRef("by_session", frame.execution_id)).value == value
        assert reader.journal("0:s").value == value


def test_anonymous_names_are_numbered_and_continue_after_reopen(stores, program):
    store = stores.open()
    run = store.create_run(program)
    names = [run.next_anonymous() for _ in range(3)]
    assert names == ["anon_001", "anon_002", "anon_003"]
    for index, name in enumerate(names):
        finish(store, run, BindingRef(name), f"output {index}", f"{index}:anon",
               kind="anonymous", source='session "x"')
    assert run.read_binding(BindingRef("anon_002")).kind == "anonymous"
    again = stores.open().open_run(run.id)
    assert again.next_anonymous() == "anon_004"
    assert store.create_run(program).next_anonymous() == "anon_001"  # per run


# ---------------------------------------------------------------------------- scope

def test_resolve_walks_the_frame_chain_outward_then_root(stores, program):
    store = stores.open()
    run = store.create_run(program)
    outer = run.push_frame("outer")
    inner = run.push_frame("inner", parent=outer.execution_id)
    sibling = run.push_frame("sibling", parent=outer.execution_id)
    o, i, s = outer.execution_id, inner.execution_id, sibling.execution_id

    def put(name: str, eid: int | None, value: str) -> None:
        run.write_binding(BindingRef(name, eid), value, "let", f"let {name} = {value!r}")

    put("x", None, "root x")
    put("x", o, "outer x")
    put("x", i, "inner x")
    put("y", o, "outer y")
    put("z", None, "root z")
    put("w", s, "sibling w")

    for reader in (run, stores.open().open_run(run.id)):
        def value(name: str, eid: int | None, reader=reader) -> str | None:
            found = reader.resolve(name, eid)
            return None if found is None else found.value

        assert value("x", i) == "inner x"     # innermost shadows outer and root
        assert value("x", o) == "outer x"
        assert value("x", s) == "outer x"     # the sibling sees its parent, not its sibling
        assert value("x", None) == "root x"
        assert value("y", i) == "outer y"     # found one frame out
        assert value("y", None) is None       # root does not see into frames
        assert value("z", i) == "root z"      # falls back to root
        assert value("w", i) is None          # a sibling frame is not visible
        assert value("w", o) is None          # nor is a child frame from its parent
        assert value("w", s) == "sibling w"
        assert value("nowhere", i) is None
        found = reader.resolve("x", i)
        assert (found.name, found.execution_id) == ("x", i)

    with pytest.raises(NotFoundError):
        run.resolve("x", 999)


def test_frames_depth_and_max_depth(stores, program):
    store = stores.open()
    run = store.create_run(program)
    first = run.push_frame("recurse", {"n": "3"}, max_depth=3)
    second = run.push_frame("recurse", {"n": "2"}, parent=first.execution_id, max_depth=3)
    third = run.push_frame("recurse", {"n": "1"}, parent=second.execution_id, max_depth=3)
    assert [f.depth for f in (first, second, third)] == [1, 2, 3]
    assert [f.parent for f in (first, second, third)] == [None, first.execution_id,
                                                           second.execution_id]
    with pytest.raises(DepthLimitExceeded) as err:
        run.push_frame("recurse", parent=third.execution_id, max_depth=3)
    assert (err.value.block, err.value.limit) == ("recurse", 3)
    assert "max_depth 3" in str(err.value)
    assert len(run.frames()) == 3  # the refused frame was not recorded
    assert [f.execution_id for f in run.call_stack(third.execution_id)] == [
        third.execution_id, second.execution_id, first.execution_id]
    with pytest.raises(NotFoundError):
        run.push_frame("recurse", parent=42)
    # a sibling at depth 2 is still allowed
    assert run.push_frame("recurse", parent=first.execution_id, max_depth=3).depth == 2


def test_execution_ids_are_monotonic_from_one_and_survive_reopen(stores, program):
    store = stores.open()
    run = store.create_run(program)
    ids = [run.push_frame("step", {"i": str(n)}).execution_id for n in range(3)]
    assert ids == [1, 2, 3]
    run.pop_frame(2)
    assert run.frame(2).status == "completed"
    with pytest.raises(NotFoundError):
        run.pop_frame(7)

    again = stores.open().open_run(run.id)
    assert [(f.execution_id, f.block, f.depth, f.status, f.args) for f in again.frames()] == [
        (1, "step", 1, "executing", {"i": "0"}), (2, "step", 1, "completed", {"i": "1"}),
        (3, "step", 1, "executing", {"i": "2"})]
    assert again.push_frame("step").execution_id == 4
    assert stores.open().open_run(run.id).push_frame("step").execution_id == 5
    assert store.create_run(program).push_frame("other").execution_id == 1  # per run


# ---------------------------------------------------------------------------- sessions

def test_session_grant_write_complete(stores, backend, program):
    store = stores.open()
    run = store.create_run(program)
    run.write_binding(BindingRef("topic"), "tides", "input", 'input topic: "t"')
    run.record_intent("1:research", "hash-1", {"line": 2})
    grant = run.grant_session(BindingRef("research"), "let",
                              'let research = session "Research {topic}"',
                              context=[BindingRef("topic")])
    assert isinstance(grant.token, str) and grant.token
    assert grant.binding == BindingRef("research")
    assert grant.context_locations == {"topic": run.binding_location(BindingRef("topic"))}
    assert grant.binding_location == run.binding_location(BindingRef("research"))
    assert grant.memory_location is None and grant.segment_location is None
    if backend == "filesystem":
        assert grant.binding_location == f".prose/runs/{run.id}/bindings/research.md"

    handle = store.session(grant.token)
    assert handle.read_context("topic") == "tides"
    handle.write_output("draft")
    handle.write_output("findings about tides")  # a session may rewrite its own binding
    binding = run.complete_session(grant.token, "1:research", input_hash="hash-1",
                                   usage=Usage(10, 20, 0.25))
    assert binding.value == "findings about tides"

    stored = run.read_binding(BindingRef("research"))
    assert (stored.kind, stored.source, stored.value) == (
        "let", 'let research = session "Research {topic}"', "findings about tides")
    entry = run.journal("1:research")
    assert (entry.kind, entry.status, entry.input_hash, entry.value, entry.binding) == (
        "result", "completed", "hash-1", "findings about tides", BindingRef("research"))
    assert entry.usage.input_tokens == 10
    with pytest.raises(CapabilityError):
        store.session(grant.token)


def test_complete_session_with_the_value_the_vm_received(stores, program):
    store = stores.open()
    run = store.create_run(program)
    frame = run.push_frame("block")
    ref = BindingRef("summary", frame.execution_id)
    grant = run.grant_session(ref, "output", "output summary = session")
    run.complete_session(grant.token, "2:summary", value="returned by the provider")
    for reader in (run, stores.open().open_run(run.id)):
        binding = reader.read_binding(ref)
        assert (binding.kind, binding.value) == ("output", "returned by the provider")
        assert reader.journal("2:summary").binding == ref


def test_completing_a_session_that_wrote_nothing_is_an_error(stores, program):
    store = stores.open()
    run = store.create_run(program)
    grant = run.grant_session(BindingRef("silent"), "let", "let silent = session")
    with pytest.raises(NotFoundError):
        run.complete_session(grant.token, "0:silent")
    assert run.journal("0:silent") is None
    store.session(grant.token).write_output("late")  # still live, may still write
    run.complete_session(grant.token, "0:silent")
    assert run.read_binding(BindingRef("silent")).value == "late"


def test_read_context_reads_root_and_scoped_bindings(stores, program):
    store = stores.open()
    run = store.create_run(program)
    frame = run.push_frame("block")
    run.write_binding(BindingRef("topic"), "root topic", "input", "input topic")
    run.write_binding(BindingRef("chunk", frame.execution_id), "scoped chunk", "param", "chunk")
    grant = run.grant_session(BindingRef("out", frame.execution_id), "let", "let out = s",
                              context=[BindingRef("topic"),
                                       BindingRef("chunk", frame.execution_id)])
    fresh = stores.open()  # a session served by another process after a restart
    handle = fresh.session(grant.token)
    assert handle.read_context("topic") == "root topic"
    assert handle.read_context("chunk") == "scoped chunk"
    missing = run.grant_session(BindingRef("other"), "let", "s",
                                context=[BindingRef("not_yet")])
    with pytest.raises(NotFoundError):  # in context, but not written yet
        store.session(missing.token).read_context("not_yet")


# ---------------------------------------------------------------------------- agents

def agent_dir(scope: str, project: Path, home: Path, run_id: str) -> Path:
    return {
        "execution": project / ".prose" / "runs" / run_id / "agents" / "captain",
        "project": project / ".prose" / "agents" / "captain",
        "user": home / ".prose" / "agents" / "captain",
        "custom": project / "team" / "captain",
    }[scope]


@pytest.mark.parametrize("scope", ["execution", "project", "user", "custom"])
def test_agent_memory_and_segments_per_scope(stores, backend, program, scope):
    store = stores.open()
    run = store.create_run(program)
    agent = AgentRef("captain", scope, "team/captain" if scope == "custom" else None)
    grant = run.grant_session(BindingRef("review"), "let", "let review = resume: captain",
                              agent=agent)
    assert grant.memory_location and grant.segment_location
    handle = store.session(grant.token)
    assert handle.read_memory() is None
    assert not run.has_memory(agent)
    memory = "# Agent Memory: captain\r\n\r\nremembered"
    handle.write_memory("# Agent Memory: captain\n\nfirst draft")
    handle.write_memory(memory)
    assert handle.read_memory() == memory
    assert handle.append_segment("# Segment 001\nreviewed") == 1
    assert handle.append_segment("# Segment 002\r\nreviewed again") == 2
    handle.write_output("looks good")
    run.complete_session(grant.token, "3:review")

    for reader in (run, stores.open().open_run(run.id)):
        assert reader.has_memory(agent)
        assert reader.memory(agent) == memory
        assert reader.segments(agent) == [(1, "# Segment 001\nreviewed"),
                                          (2, "# Segment 002\r\nreviewed again")]

    root = stores.root.resolve()
    where = agent_dir(scope, root, stores.home.resolve(), run.id)
    if backend == "filesystem" or scope == "custom":
        assert (where / "memory.md").read_text(encoding="utf-8").endswith("remembered")
        assert (where / "captain-001.md").read_text(encoding="utf-8").endswith("reviewed")
        assert (where / "captain-002.md").is_file()
        assert grant.segment_location.endswith("captain/captain-001.md")
        assert grant.memory_location.endswith("captain/memory.md")
    else:
        assert "captain" in grant.memory_location
        assert "segment_number=1" in grant.segment_location
        assert not where.exists()
    if backend == "sqlite" and scope == "project":
        assert (root / ".prose" / "agents.db").is_file()
    if backend == "sqlite" and scope == "user":
        assert (stores.home / ".prose" / "agents.db").is_file()


@pytest.mark.parametrize("scope", ["project", "user", "custom"])
def test_lasting_agents_continue_their_segments_across_runs(stores, program, scope):
    store = stores.open()
    agent = AgentRef("captain", scope, "team/captain" if scope == "custom" else None)

    def one_session(store: StateStore, run, text: str) -> str:
        grant = run.grant_session(BindingRef("review"), "let", "resume: captain", agent=agent)
        handle = store.session(grant.token)
        memory = handle.read_memory()
        handle.write_memory(f"{memory or ''}{text};")
        number = handle.append_segment(text)
        handle.write_output(text)
        run.complete_session(grant.token, "0:review")
        assert str(number) in grant.segment_location or f"{number:03d}" in \
            grant.segment_location
        return memory or ""

    assert one_session(store, store.create_run(program), "one") == ""
    assert one_session(store, store.create_run(program), "two") == "one;"
    fresh = stores.open()
    third = fresh.create_run(program)
    assert one_session(fresh, third, "three") == "one;two;"
    assert third.segments(agent) == [(1, "one"), (2, "two"), (3, "three")]


def test_execution_agents_start_fresh_in_each_run(stores, program):
    store = stores.open()
    agent = AgentRef("captain", "execution")
    for text in ("one", "two"):
        run = store.create_run(program)
        grant = run.grant_session(BindingRef("r"), "let", "session: captain", agent=agent)
        handle = store.session(grant.token)
        assert handle.read_memory() is None
        handle.write_memory(text)
        assert handle.append_segment(text) == 1
        handle.write_output(text)
        run.complete_session(grant.token, "0:r")
        assert run.segments(agent) == [(1, text)]


def test_user_agents_follow_the_user_across_projects(stores, program, tmp_path):
    store = stores.open()
    agent = AgentRef("captain", "user")
    run = store.create_run(program)
    grant = run.grant_session(BindingRef("r"), "let", "session: captain", agent=agent)
    store.session(grant.token).write_memory("knows the user")
    run.complete_session(grant.token, "0:r", value="ok")

    other = stores.open(project=tmp_path / "elsewhere")
    other_run = other.create_run(program)
    assert other_run.memory(agent) == "knows the user"
    assert other_run.memory(AgentRef("captain", "project")) is None


# ---------------------------------------------------------------------------- large values

def test_large_values_round_trip(stores, backend, program):
    store = stores.open()
    run = store.create_run(program)
    frame = run.push_frame("block")
    big = ("line of text with ünïcødé\r\n" * 8000)[: LARGE_VALUE * 2]
    assert len(big.encode()) > LARGE_VALUE
    run.write_binding(BindingRef("big_input"), big, "input", "input big_input")
    finish(store, run, BindingRef("big_output", frame.execution_id), big + "!", "0:big")
    limit = "x" * LARGE_VALUE  # exactly at the limit: stays inline
    run.write_binding(BindingRef("at_limit"), limit, "let", "let at_limit = x")

    for reader in (run, stores.open().open_run(run.id)):
        assert reader.read_binding(BindingRef("big_input")).value == big
        assert reader.read_binding(BindingRef("big_output", frame.execution_id)).value == \
            big + "!"
        assert reader.resolve("big_output", frame.execution_id).value == big + "!"
        assert reader.read_binding(BindingRef("at_limit")).value == limit
        assert reader.journal("0:big").value == big + "!"

    run_dir = Path(run.location)
    if backend == "sqlite":
        attachments = run_dir / "attachments"
        assert sorted(p.name for p in attachments.iterdir()) == [
            "big_input.md", f"big_output__{frame.execution_id}.md"]
        with sqlite3.connect(run_dir / "state.db") as db:
            rows = dict(db.execute("SELECT name, length(value) FROM bindings").fetchall())
        assert rows["big_input"] < 1000 and rows["big_output"] < 1000
        assert rows["at_limit"] == LARGE_VALUE

    # a large value replaced by a small one reads back small
    run.write_binding(BindingRef("big_input"), "small now", "input", "input big_input")
    assert stores.open().open_run(run.id).read_binding(BindingRef("big_input")).value == \
        "small now"


# ---------------------------------------------------------------------------- journal

def test_journal_records_intents_and_results_by_key(stores, program):
    store = stores.open()
    run = store.create_run(program)
    run.record_intent("1:research", "h1", {"line": 2})
    assert (run.journal("1:research").kind, run.journal("1:research").status) == (
        "intent", "started")
    run.record_result("1:research", input_hash="h1", binding=BindingRef("research"),
                      value={"answer": [1, 2]})
    run.record_intent("1:research", "h1")  # a resumed run restating its intent
    run.record_result("2:summary", status="failed", error="provider down")
    run.record_intent("3:report", "h3")

    for reader in (run, stores.open().open_run(run.id)):
        result = reader.journal("1:research")
        assert (result.kind, result.status, result.input_hash, result.value, result.binding) \
            == ("result", "completed", "h1", {"answer": [1, 2]}, BindingRef("research"))
        failed = reader.journal("2:summary")
        assert (failed.status, failed.error) == ("failed", "provider down")
        assert reader.journal("3:report").kind == "intent"
        assert reader.journal("4:never") is None
        assert {e.key for e in reader.journal_entries()} == {"1:research", "2:summary",
                                                              "3:report"}


def test_verdicts_keep_value_and_reason(stores, program):
    store = stores.open()
    run = store.create_run(program)
    run.record_verdict("5:cond", "h5", True, "the analysis covers every risk")
    run.record_verdict("6:choice", "h6", "option b", "b is cheaper")
    run.record_result("5:cond", value="a step result under the same key")
    for reader in (run, stores.open().open_run(run.id)):
        verdict = reader.verdict("5:cond")
        assert (verdict.kind, verdict.value, verdict.reason, verdict.input_hash) == (
            "verdict", True, "the analysis covers every risk", "h5")
        assert reader.verdict("6:choice").value == "option b"
        assert reader.journal("5:cond").value == "a step result under the same key"
        assert reader.verdict("7:none") is None


def test_usage_is_summed_per_run_and_reloaded(stores, program):
    store = stores.open()
    run = store.create_run(program)
    other = store.create_run(program)
    assert run.usage_totals() == Usage()
    for index, usage in enumerate([Usage(100, 20, 0.125), Usage(7, 3, 0.5)]):
        grant = run.grant_session(BindingRef(f"s{index}"), "let", "session")
        run.complete_session(grant.token, f"{index}:s", value="v", usage=usage)
    run.record_result("9:x", usage=Usage(1, 1, 0.25))
    grant = other.grant_session(BindingRef("elsewhere"), "let", "session")
    other.complete_session(grant.token, "0:e", value="v", usage=Usage(1000, 1000, 10.0))

    expected = Usage(108, 24, 0.875, 3)
    assert run.usage_totals() == expected
    fresh = stores.open()
    assert fresh.open_run(run.id).usage_totals() == expected
    assert fresh.open_run(other.id).usage_totals() == Usage(1000, 1000, 10.0, 1)


# ---------------------------------------------------------------------------- state.md

def test_state_md_is_written_and_read_back(stores, backend, program):
    store = stores.open()
    run = store.create_run(program, "main.prose")
    assert run.state_text() == ""
    finish(store, run, BindingRef("research"), "found", "1:research")
    run.update_state(StateSnapshot((
        StatementStatus(2, 2, "complete", "research.md"),
        StatementStatus(3, 4, "executing"),
    )))
    text = run.state_text()
    assert text.startswith("# Execution State\n")
    assert f"run: {run.id}" in text and "program: main.prose" in text
    assert "# --> bindings/research.md (complete)" in text
    assert "# <-- EXECUTING" in text
    assert "| research | let |" in text
    assert stores.open().open_run(run.id).state_text() == text
    if backend == "filesystem":
        assert (Path(run.location) / "state.md").read_text(encoding="utf-8") == text

    run.update_state(StateSnapshot((StatementStatus(3, 4, "complete"),)))
    assert stores.open().open_run(run.id).state_text() == run.state_text() != text


# ---------------------------------------------------------------------------- imports

def test_import_runs_nest_under_their_parent(stores, backend, program):
    store = stores.open()
    run = store.create_run(program)
    child = run.child("@alice", "research", "output findings = session \"f\"\n", "r.prose")
    assert child.id == f"{run.id}/imports/alice--research"
    assert child.location == str(Path(run.location) / "imports" / "alice--research")
    assert (Path(child.location) / "program.prose").read_text(encoding="utf-8") == \
        "output findings = session \"f\"\n"

    run.write_binding(BindingRef("findings"), "parent's", "let", "let findings = 1")
    grant = child.grant_session(BindingRef("findings"), "output", "output findings")
    store.session(grant.token).write_output("child's")
    child.complete_session(grant.token, "0:findings")
    grandchild = child.child("bob", "deep", "output z = session \"z\"\n")
    grandchild.write_binding(BindingRef("z"), "deepest", "output", "output z")
    assert grandchild.id == f"{child.id}/imports/bob--deep"

    fresh = stores.open()
    parent = fresh.open_run(run.id, vm_token=run.vm_token)
    assert parent.read_binding(BindingRef("findings")).value == "parent's"
    again = parent.child("alice", "research", "ignored: the existing run is reopened")
    assert again.id == child.id
    assert again.program_source == "output findings = session \"f\"\n"
    assert again.read_binding(BindingRef("findings")).value == "child's"
    assert again.journal("0:findings").value == "child's"
    assert fresh.open_run(child.id, vm_token=run.vm_token).read_binding(
        BindingRef("findings")).value == "child's"
    assert fresh.open_run(grandchild.id).read_binding(BindingRef("z")).value == "deepest"
    assert fresh.backend.list_children(run.id) == [child.id]
    assert [info.id for info in fresh.list_runs()] == [run.id]


# ---------------------------------------------------------------------------- restart

def test_a_fresh_store_keeps_everything(stores, program):
    store = stores.open()
    run = store.create_run(program, "main.prose")
    frame = run.push_frame("process", {"chunk": "c1"})
    run.write_binding(BindingRef("topic"), "tides", "input", "input topic")
    agent = AgentRef("captain", "execution")
    done = run.grant_session(BindingRef("research"), "let", "let research = session",
                             [BindingRef("topic")], agent)
    handle = store.session(done.token)
    handle.write_memory("mem")
    handle.append_segment("seg")
    handle.write_output("done value")
    run.complete_session(done.token, "1:research", usage=Usage(3, 4, 0.5))
    ended = run.grant_session(BindingRef("abandoned"), "let", "let abandoned = session")
    run.end_session(ended.token)
    live = run.grant_session(BindingRef("part", frame.execution_id), "let", "let part = s",
                             [BindingRef("topic")])
    store.session(live.token).write_output("half")
    run.record_verdict("2:cond", "h", False, "not yet")
    run.update_state(StateSnapshot((StatementStatus(2, 2, "executing"),)))
    state = run.state_text()

    fresh = stores.open()
    again = fresh.open_run(run.id, vm_token=run.vm_token)
    assert again.read_binding(BindingRef("research")).value == "done value"
    assert again.read_binding(BindingRef("topic")).value == "tides"
    assert again.read_binding(BindingRef("part", frame.execution_id)).value == "half"
    assert [(f.execution_id, f.args) for f in again.frames()] == [(1, {"chunk": "c1"})]
    assert again.memory(agent) == "mem" and again.segments(agent) == [(1, "seg")]
    assert again.usage_totals() == Usage(3, 4, 0.5, 1)
    assert again.verdict("2:cond").reason == "not yet"
    assert again.state_text() == state

    # dead tokens stay dead
    for token in (done.token, ended.token):
        with pytest.raises(CapabilityError):
            fresh.session(token)
    # the live token still works, and its binding is still the session's
    with pytest.raises(CapabilityError):
        again.write_binding(BindingRef("part", frame.execution_id), "vm", "let", "x")
    resumed = fresh.session(live.token)
    assert resumed.read_context("topic") == "tides"
    resumed.write_output("whole")
    again.complete_session(live.token, "3:part")
    assert stores.open().open_run(run.id).read_binding(
        BindingRef("part", frame.execution_id)).value == "whole"
    with pytest.raises(CapabilityError):
        stores.open().session(live.token)


def test_a_vm_write_after_a_session_survives_reopen(stores, program):
    store = stores.open()
    run = store.create_run(program)
    finish(store, run, BindingRef("draft"), "from the session", "0:draft")
    run.write_binding(BindingRef("draft"), "rewritten by the program", "let", "draft = x")
    for _ in range(2):
        assert stores.open().open_run(run.id).read_binding(BindingRef("draft")).value == \
            "rewritten by the program"


def test_a_reopened_run_enters_a_keyed_call_again_under_its_execution_id(stores, program):
    run = stores.open().create_run(program)
    outer = run.push_frame("outer", key="1>outer")
    inner = run.push_frame("inner", parent=outer.execution_id, key="1>outer.0>inner")
    run.push_frame("plain")

    again = stores.open().open_run(run.id)
    assert again.push_frame("outer", key="1>outer").execution_id == outer.execution_id
    assert again.push_frame("inner", parent=outer.execution_id,
                            key="1>outer.0>inner").execution_id == inner.execution_id
    # once per drive: the same place entered again in this drive is a new call
    assert again.push_frame("outer", key="1>outer").execution_id == 4
    assert again.push_frame("other", key="9>other").execution_id == 5
    for eid in (2, 1, 4, 5):
        again.pop_frame(eid)
    again.finish("completed")  # the call never entered again is not left executing
    statuses = {f.execution_id: f.status for f in stores.open().open_run(run.id).frames()}
    assert statuses == {1: "completed", 2: "completed", 3: "cancelled", 4: "completed",
                        5: "completed"}


def test_a_sqlite_run_made_before_call_keys_opens_and_keys_its_calls(tmp_path, program):
    import sqlite3

    from openprose.state import open_store

    with open_store(tmp_path, "sqlite", home=tmp_path / "home") as store:
        run = store.create_run(program)
        run.push_frame("old")
    db = tmp_path / ".prose" / "runs" / run.id / "state.db"
    with sqlite3.connect(db) as conn:  # the table as the first release made it
        conn.execute("ALTER TABLE frames DROP COLUMN call_key")
        conn.execute("PRAGMA user_version = 0")  # which never stamped its schema
    with open_store(tmp_path, "sqlite", home=tmp_path / "home") as store:
        again = store.open_run(run.id)
        assert [f.block for f in again.frames()] == ["old"]
        again.push_frame("new", key="3>new")
    with open_store(tmp_path, "sqlite", home=tmp_path / "home") as store:
        assert store.open_run(run.id).push_frame("new", key="3>new").execution_id == 2
