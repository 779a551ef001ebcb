"""Group commit: many finished sessions in one durable write, on every backend."""

from __future__ import annotations

from openprose.state import (
    BindingRef,
    CapabilityError,
    Completion,
    InvalidNameError,
    NotFoundError,
    SessionStart,
    StateStore,
    Usage,
)


def _grants(store: StateStore, count: int):
    run = store.create_run('let x = session "x"\n', "main.prose")
    grants = [run.grant_session(BindingRef(f"b{i}"), "let", f'let b{i} = session "x"')
              for i in range(count)]
    return run, grants


def test_a_batch_commits_every_session(stores) -> None:
    store = stores.open()
    run, grants = _grants(store, 20)
    store.session(grants[3].token).write_output("written by the session itself")
    done = [Completion(g.token, f"k{i}", f"h{i}", None if i == 3 else f"value {i}",
                       Usage(input_tokens=i, output_tokens=1))
            for i, g in enumerate(grants)]

    results = run.complete_sessions(done)

    assert [r.value for r in results] == [
        "written by the session itself" if i == 3 else f"value {i}" for i in range(20)]
    assert run.usage_totals().sessions == 20
    assert run.usage_totals().input_tokens == sum(range(20))
    reopened = stores.open().open_run(run.id)
    for i in range(20):
        assert reopened.journal(f"k{i}").status == "completed"
        expected = "written by the session itself" if i == 3 else f"value {i}"
        assert reopened.read_binding(BindingRef(f"b{i}")).value == expected


def test_one_bad_completion_does_not_keep_the_others_out(stores) -> None:
    store = stores.open()
    run, grants = _grants(store, 3)
    run.complete_session(grants[1].token, "early", value="first")

    results = run.complete_sessions([
        Completion(grants[0].token, "k0", value="zero"),
        Completion(grants[1].token, "k1", value="again"),   # its token already ended
        Completion(grants[2].token, "k2"),                  # never wrote its binding
    ])

    assert results[0].value == "zero"
    assert isinstance(results[1], CapabilityError)
    assert "completes" in str(results[1])
    assert isinstance(results[2], NotFoundError)
    assert run.read_binding(BindingRef("b1")).value == "first"
    assert run.journal("k1") is None
    assert run.journal("k0").status == "completed"
    # The session that failed to write may still write and finish.
    store.session(grants[2].token).write_output("late")
    assert run.complete_session(grants[2].token, "k2").value == "late"


def test_sessions_start_together_in_one_write(stores) -> None:
    store = stores.open()
    run = store.create_run('let x = session "x"\n', "main.prose")
    run.write_binding(BindingRef("topic"), "tides", "input", "input topic")
    starts = [SessionStart(f"k{i}", f"h{i}", BindingRef(f"b{i}"), "let", f"let b{i} = x",
                           (BindingRef("topic"),), meta={"line": i}) for i in range(5)]
    starts[2] = SessionStart("k2", "h2", BindingRef("../escape"), "let", "bad")

    grants = run.start_sessions(starts)

    assert isinstance(grants[2], InvalidNameError)
    live = [g for i, g in enumerate(grants) if i != 2]
    for grant in live:
        assert store.session(grant.token).read_context("topic") == "tides"
    reopened = stores.open().open_run(run.id)
    assert [reopened.journal(f"k{i}").kind for i in (0, 1, 3, 4)] == ["intent"] * 4
    assert reopened.journal("k2") is None
    assert run.complete_sessions([Completion(g.token, f"k{i}", value=f"v{i}")
                                  for i, g in enumerate(live)])[3].value == "v3"
    assert stores.open().open_run(run.id).read_binding(BindingRef("b4")).value == "v3"


def test_two_sessions_of_one_binding_finishing_together_leave_the_later_value(stores) -> None:
    """Iterations of a ``parallel for`` may bind the same name; one batch holds both."""
    store = stores.open()
    run = store.create_run('let x = session "x"\n', "main.prose")
    ref = BindingRef("x")
    first = run.grant_session(ref, "let", 'let x = session "x"')
    second = run.grant_session(ref, "let", 'let x = session "x"')

    results = run.complete_sessions([Completion(first.token, "a", "ha", "one"),
                                     Completion(second.token, "b", "hb", "two")])

    assert [r.value for r in results] == ["one", "two"]
    reopened = stores.open().open_run(run.id)
    assert reopened.read_binding(ref).value == "two"
    assert (reopened.journal("a").value, reopened.journal("b").value) == ("one", "two")
