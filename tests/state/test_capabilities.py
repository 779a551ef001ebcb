"""Every write the capability rules forbid is refused with a CapabilityError naming the rule,
on every backend, and leaves the state as it was."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from openprose.engine.permissions import Permissions, from_grant, grant_fields
from openprose.state import (
    AgentRef,
    BindingRef,
    CapabilityError,
    DamagedState,
    NotFoundError,
    SessionStart,
    StateStore,
)

ONLY_ITS_BINDING = "a session may write only its assigned binding"
ONLY_ITS_CONTEXT = "a session reads only the bindings it was given as context"
ONLY_AGENT_MEMORY = "only a persistent agent's session touches its memory"
DIES_WITH_SESSION = "a token dies when its session completes"
LIVE_TOKEN = "a session writes only with a live session capability"
VM_ONLY = "only the VM capability may drive a run"
SESSION_OWNS_BINDING = "a session's binding is written by that session"


def refused(rule: str, call: Callable[[], object]) -> CapabilityError:
    """``call`` raises a CapabilityError for ``rule``, and its message names the rule."""
    with pytest.raises(CapabilityError) as err:
        call()
    assert err.value.rule == rule
    assert f"(rule: {rule})" in str(err.value)
    return err.value


@pytest.fixture
def setup(store: StateStore, program: str):
    """A run with a root input and a scoped binding, and a live session for ``research``."""
    run = store.create_run(program)
    frame = run.push_frame("block")
    run.write_binding(BindingRef("topic"), "tides", "input", "input topic")
    run.write_binding(BindingRef("secret"), "not for sessions", "let", "let secret = 1")
    run.write_binding(BindingRef("chunk", frame.execution_id), "c", "param", "chunk")
    grant = run.grant_session(BindingRef("research"), "let", "let research = session",
                              context=[BindingRef("topic")])
    return run, frame, grant


# ---------------------------------------------------------------------------- writes

def test_a_session_writes_no_other_binding(store, setup):
    run, frame, grant = setup
    handle = store.session(grant.token)
    refused(ONLY_ITS_BINDING, lambda: handle.write_binding("topic", "overwritten"))
    refused(ONLY_ITS_BINDING, lambda: handle.write_binding("summary", "new"))
    refused(ONLY_ITS_BINDING, lambda: handle.write_binding("research", "x", frame.execution_id))
    refused(ONLY_ITS_BINDING, lambda: handle.write_binding("chunk", "x", frame.execution_id))
    assert run.read_binding(BindingRef("topic")).value == "tides"
    assert run.read_binding(BindingRef("chunk", frame.execution_id)).value == "c"
    for ref in (BindingRef("summary"), BindingRef("research", frame.execution_id),
                BindingRef("research")):
        with pytest.raises(NotFoundError):
            run.read_binding(ref)
    handle.write_binding("research", "its own")  # its own binding, by name, is fine
    assert run.read_binding(BindingRef("research")).value == "its own"


def test_a_scoped_session_writes_only_its_execution_id(store, setup):
    run, frame, _ = setup
    grant = run.grant_session(BindingRef("part", frame.execution_id), "let", "let part = s")
    handle = store.session(grant.token)
    refused(ONLY_ITS_BINDING, lambda: handle.write_binding("part", "root"))
    refused(ONLY_ITS_BINDING, lambda: handle.write_binding("part", "x", frame.execution_id + 1))
    handle.write_binding("part", "mine", frame.execution_id)
    assert run.read_binding(BindingRef("part", frame.execution_id)).value == "mine"
    with pytest.raises(NotFoundError):
        run.read_binding(BindingRef("part"))


def test_a_session_reads_only_its_context(store, setup):
    _, _, grant = setup
    handle = store.session(grant.token)
    assert handle.read_context("topic") == "tides"
    for name in ("secret", "chunk", "research", "nonexistent"):
        refused(ONLY_ITS_CONTEXT, lambda name=name: handle.read_context(name))


def test_memory_needs_an_agent_session(store, setup):
    run, _, grant = setup
    handle = store.session(grant.token)
    refused(ONLY_AGENT_MEMORY, handle.read_memory)
    refused(ONLY_AGENT_MEMORY, lambda: handle.write_memory("sneaky"))
    refused(ONLY_AGENT_MEMORY, lambda: handle.append_segment("sneaky"))
    assert grant.memory_location is None
    assert run.backend.list_agents(run.id) == []


# ---------------------------------------------------------------------------- ended tokens

AFTER_END: dict[str, Callable[..., object]] = {
    "write_output": lambda h: h.write_output("late"),
    "write_binding": lambda h: h.write_binding("research", "late"),
    "read_context": lambda h: h.read_context("topic"),
    "read_memory": lambda h: h.read_memory(),
    "write_memory": lambda h: h.write_memory("late"),
    "append_segment": lambda h: h.append_segment("late"),
}


@pytest.mark.parametrize("how", ["completed", "ended"])
@pytest.mark.parametrize("call", list(AFTER_END), ids=list(AFTER_END))
def test_nothing_works_after_the_token_ended(stores, store, program, how, call):
    run = store.create_run(program)
    run.write_binding(BindingRef("topic"), "tides", "input", "input topic")
    agent = AgentRef("captain", "project")
    grant = run.grant_session(BindingRef("research"), "let", "let research = session",
                              context=[BindingRef("topic")], agent=agent)
    handle = store.session(grant.token)
    handle.write_memory("before")
    handle.write_output("final")
    if how == "completed":
        run.complete_session(grant.token, "0:research")
    else:
        run.end_session(grant.token)

    refused(DIES_WITH_SESSION, lambda: AFTER_END[call](handle))
    refused(DIES_WITH_SESSION, lambda: store.session(grant.token))
    # ... and after a restart
    fresh = stores.open()
    refused(DIES_WITH_SESSION, lambda: fresh.session(grant.token))

    assert run.read_binding(BindingRef("research")).value == "final"
    assert run.memory(agent) == "before"
    assert run.segments(agent) == []


def test_unknown_and_malformed_tokens_are_refused(store, setup):
    run, _, grant = setup
    for token in ("ses_" + "A" * 32, "vm_unknown", grant.token + "x", run.vm_token):
        refused(LIVE_TOKEN, lambda token=token: store.session(token))
    for token in ("", "no-underscore", None, 42, b"ses_bytes"):
        refused(LIVE_TOKEN, lambda token=token: store.session(token))  # type: ignore[arg-type]
    for token in ("ses_" + "A" * 32, "garbage"):
        refused(DIES_WITH_SESSION, lambda token=token: run.end_session(token))
        refused(LIVE_TOKEN, lambda token=token: run.complete_session(token, "0:x", value="v"))
    assert store.session(grant.token).binding == BindingRef("research")


# ---------------------------------------------------------------------------- VM capability

def test_open_run_needs_the_right_vm_token(stores, program):
    store = stores.open()
    run = store.create_run(program)
    other = store.create_run(program)
    for opener in (store, stores.open()):
        refused(VM_ONLY, lambda opener=opener: opener.open_run(run.id, vm_token="vm_wrong"))
        refused(VM_ONLY, lambda opener=opener: opener.open_run(run.id, vm_token=other.vm_token))
        grant = run.grant_session(BindingRef("x"), "let", "s")
        refused(VM_ONLY, lambda opener=opener, t=grant.token: opener.open_run(run.id,
                                                                              vm_token=t))
        assert opener.open_run(run.id, vm_token=run.vm_token).id == run.id


def test_the_vm_may_not_overwrite_a_live_sessions_binding(stores, store, setup):
    run, frame, grant = setup
    scoped = run.grant_session(BindingRef("part", frame.execution_id), "let", "let part = s")
    store.session(grant.token).write_output("the session's")
    refused(SESSION_OWNS_BINDING,
            lambda: run.write_binding(BindingRef("research"), "vm's", "let", "x"))
    refused(SESSION_OWNS_BINDING, lambda: run.write_binding(
        BindingRef("part", frame.execution_id), "vm's", "let", "x"))
    run.write_binding(BindingRef("part"), "root part is not the session's", "let", "x")
    assert run.read_binding(BindingRef("research")).value == "the session's"

    again = stores.open().open_run(run.id)  # the rule holds after a restart
    refused(SESSION_OWNS_BINDING,
            lambda: again.write_binding(BindingRef("research"), "vm's", "let", "x"))

    run.complete_session(grant.token, "0:research")
    run.end_session(scoped.token)
    run.write_binding(BindingRef("research"), "vm's now", "let", "x")
    run.write_binding(BindingRef("part", frame.execution_id), "vm's now", "let", "x")
    assert run.read_binding(BindingRef("research")).value == "vm's now"


# ---------------------------------------------------------------------------- ending

def test_a_token_ends_only_once(stores, store, setup):
    run, _, grant = setup
    store.session(grant.token).write_output("v")
    run.complete_session(grant.token, "0:research")
    refused(DIES_WITH_SESSION, lambda: run.complete_session(grant.token, "0:research"))
    refused(DIES_WITH_SESSION, lambda: run.end_session(grant.token))
    refused(DIES_WITH_SESSION, lambda: stores.open().open_run(run.id).end_session(grant.token))

    abandoned = run.grant_session(BindingRef("other"), "let", "s")
    run.end_session(abandoned.token)
    refused(DIES_WITH_SESSION, lambda: run.end_session(abandoned.token))
    refused(DIES_WITH_SESSION,
            lambda: run.complete_session(abandoned.token, "1:other", value="late"))
    with pytest.raises(NotFoundError):
        run.read_binding(BindingRef("other"))
    assert run.journal("1:other") is None
    assert [e.key for e in run.journal_entries() if e.kind == "result"] == ["0:research"]


def test_a_run_cannot_end_another_runs_token(store, setup, program):
    run, _, grant = setup
    other = store.create_run(program)
    refused(DIES_WITH_SESSION, lambda: other.end_session(grant.token))
    refused(DIES_WITH_SESSION,
            lambda: other.complete_session(grant.token, "0:research", value="hijacked"))
    with pytest.raises(NotFoundError):
        other.read_binding(BindingRef("research"))
    assert other.journal("0:research") is None
    # the session is still live in its own run
    store.session(grant.token).write_output("still mine")
    run.complete_session(grant.token, "0:research")
    assert run.read_binding(BindingRef("research")).value == "still mine"


def test_a_token_ended_by_the_vm_is_dead_in_every_other_store_too(stores, program):
    """A session served by another store (another process) learns that its token ended,
    even when that store saw the token alive first."""
    vm_store, session_store = stores.open(), stores.open()
    run = vm_store.create_run(program)
    grant = run.grant_session(BindingRef("research"), "let", "let research = session",
                              context=[BindingRef("topic")])
    run.write_binding(BindingRef("topic"), "tides", "input", "input topic")
    handle = session_store.session(grant.token)
    handle.write_output("draft")  # alive: allowed

    run.complete_session(grant.token, "k", value="final")

    refused(DIES_WITH_SESSION, lambda: handle.write_output("overwrite after the end"))
    refused(DIES_WITH_SESSION, lambda: handle.read_context("topic"))
    refused(DIES_WITH_SESSION, lambda: session_store.session(grant.token))
    assert run.read_binding(BindingRef("research")).value == "final"


def test_a_result_arriving_after_its_step_was_cancelled_is_not_recorded(store, program):
    run = store.create_run(program)
    grant = run.grant_session(BindingRef("a"), "let", "a = session")
    run.record_result("0|0", status="cancelled")  # the join moved on
    with pytest.raises(CapabilityError, match="cancelled before its result arrived"):
        run.complete_session(grant.token, "0|0", value="late")
    assert run.journal("0|0").status == "cancelled"
    with pytest.raises(NotFoundError):
        run.read_binding(BindingRef("a"))
    with pytest.raises(CapabilityError):  # its token ended with it
        run.store.session(grant.token).write_output("late")
    again = run.grant_session(BindingRef("a"), "let", "a = session")  # started again: counts
    run.record_intent("0|0", "h")
    run.complete_session(again.token, "0|0", value="fresh")
    assert run.read_binding(BindingRef("a")).value == "fresh"


# ---------------------------------------------------------------------------- permissions

def _stored_grants(store: StateStore, run_id: str) -> list[str]:
    """The grant records as the backend stored them (lines, or capabilities rows)."""
    backend = store.backend
    if backend.name == "filesystem":
        path = backend.run_dir(run_id) / "capabilities.jsonl"
        return [line for line in path.read_text().splitlines() if '"hash"' in line]
    rows = backend.fetch(run_id, "SELECT body FROM {p}capabilities WHERE run_id = ?",
                         (run_id,))
    return [body for (body,) in rows]


def _start(run, name: str, permissions: Permissions) -> str:
    start = SessionStart(name, "h", BindingRef(name), "let", f"let {name} = session",
                         work=grant_fields("writer", permissions, name, 2))
    return run.start_sessions([start])[0].token


def test_grants_name_their_permissions_block_instead_of_copying_it(stores, program):
    """A grant and its end refer to the session's permissions block, stored once per run,
    so a grant's record does not grow with the block; every reader (another process, the
    run's listing) still gets the whole block back."""
    store = stores.open()
    run = store.create_run(program)
    wide = Permissions(read=tuple(f"docs/part-{i}/**" for i in range(40)), bash="deny")
    tokens = [_start(run, f"s{i}", wide) for i in range(3)]
    small = _start(run, "t", Permissions(read=("src/**",)))
    for token in tokens[:2]:
        run.end_session(token)

    records = _stored_grants(store, run.id)
    # four grants and two ends (SQL: a row a token)
    assert len(records) == (6 if store.backend.name == "filesystem" else 4)
    assert all(len(record) < len(json.dumps(wide.to_dict())) for record in records)
    later = stores.open()  # another process: the hook, a take-over
    for token, expected in [(tokens[0], wide), (tokens[2], wide),
                            (small, Permissions(read=("src/**",)))]:
        _, grant = later.token_grant(token)
        assert grant["work"]["permissions"] == expected.to_dict()
        assert from_grant(grant["work"]) == expected.effective()
    listed = later.backend.list_capabilities(run.id)
    assert sorted(g["work"]["permissions"]["read"][0] for g in listed) == \
        ["docs/part-0/**"] * 3 + ["src/**"]
    assert {g["name"]: g["alive"] for g in listed} == \
        {"s0": False, "s1": False, "s2": True, "t": True}


def test_grants_that_copy_their_permissions_block_still_read(stores, program):
    """A run written before grants named their block: each grant carries it whole, and
    reads as it did."""
    store = stores.open()
    run = store.create_run(program)
    token = _start(run, "s", Permissions(read=("src/**",)))
    _, grant = store.token_grant(token)
    old = {**grant, "work": {**grant["work"], "permissions": {**grant["work"]["permissions"],
                                                               "read": ["old/**"]}}}
    backend = store.backend
    if backend.name == "filesystem":
        with open(backend.run_dir(run.id) / "capabilities.jsonl", "a") as log:
            log.write(json.dumps(old) + "\n")
    else:
        backend.write(run.id, backend.UPSERT_CAPABILITY, (old["hash"], run.id, json.dumps(old)),
                      durable=True)
    _, read = stores.open().token_grant(token)
    assert from_grant(read["work"]).read == ("old/**",)


def test_a_grant_whose_permissions_block_was_altered_is_damage(fs_stores, program):
    """A block that is not what its key says (edited by hand, damaged) is never used: the
    grants naming it are refused as damaged, not read with other permissions."""
    store = fs_stores.open()
    run = store.create_run(program)
    token = _start(run, "s", Permissions(read=("src/**",), bash="deny"))
    path = store.backend.run_dir(run.id) / "capabilities.jsonl"
    path.write_text(path.read_text().replace('"bash":"deny"', '"bash":"allow"'))
    with pytest.raises(DamagedState, match="does not match its content"):
        fs_stores.open().token_grant(token)


def test_an_end_of_a_grant_recorded_nowhere_is_damage(fs_stores, program):
    """The short line that ends a grant stands only after the grant: alone, it is damage."""
    store = fs_stores.open()
    run = store.create_run(program)
    token = _start(run, "s", Permissions())
    run.end_session(token)
    path = store.backend.run_dir(run.id) / "capabilities.jsonl"
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1]).keys() == {"hash", "alive"}
    assert not fs_stores.open().token_grant(token)[1]["alive"]
    path.write_text(lines[-1] + "\n")
    with pytest.raises(DamagedState, match="ends a session grant recorded nowhere"):
        fs_stores.open().token_grant(token)
