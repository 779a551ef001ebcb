"""Names that become paths are validated: no separators, no '..', no absolute paths, no NUL
or control characters, nothing overlong; custom persist paths stay inside the project or
``~/.prose``. Nothing is created outside the roots by a refused name."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from openprose.state import (
    AgentRef,
    BindingRef,
    InvalidNameError,
    PathEscapeError,
    StateStore,
    open_store,
)
from openprose.state.names import MAX_NAME, check_run_id, contained_path

BAD_NAMES = [
    "", ".", "..", "../x", "../../etc/passwd", "a/b", "a\\b", "..\\x", "/etc/passwd",
    "/abs", "a\x00b", "a\nb", "a\tb", "a\rb", "a\x1bb", "a\x7fb", "x" * (MAX_NAME + 1),
    "-leading-dash", "9starts_with_digit", "has space", "dot.ted", "~home",
]
BAD_RUN_IDS = [
    "", "../x", "a/b", "/abs", "/etc/passwd", "..", "20260101-000000-abcdef/../x",
    "20260101-000000-abcdef/../../x", "../20260101-000000-abcdef", "20260101-000000-ABCDEF",
    "2026-01-01", "20260101-000000-abcde", "20260101-000000-abcdef\x00",
    "20260101-000000-abcdef/imports/../x", "20260101-000000-abcdef/imports/a--b/../../x",
    "20260101-000000-abcdef/imports/nohandle", "20260101-000000-abcdef\\..\\x",
]
BAD_SLUGS = ["", "..", "../x", "a/b", "a\\b", "/abs", "a\x00", "a\nb", ".hidden", "a..b",
             "@", "x" * (MAX_NAME + 1)]


def outside_files(tmp_path: Path) -> set[Path]:
    """Every path under tmp_path that is not inside the two roots' state directories."""
    allowed = [tmp_path / "project" / ".prose", tmp_path / "home" / ".prose"]
    return {p for p in tmp_path.rglob("*")
            if not any(p == a or p.is_relative_to(a) for a in allowed)}


@pytest.fixture
def run(store: StateStore, program: str):
    return store.create_run(program)


# ---------------------------------------------------------------------------- bindings

def refuses(error: type[Exception], calls: dict[str, object]) -> list[str]:
    """The labels of the calls that did not raise ``error``."""
    missed = []
    for label, call in calls.items():
        try:
            call()  # type: ignore[operator]
        except error:
            continue
        except Exception as other:
            missed.append(f"{label}: raised {type(other).__name__}: {other}")
        else:
            missed.append(f"{label}: accepted")
    return missed


def test_bad_binding_names_are_refused(tmp_path, run):
    before = outside_files(tmp_path)
    missed = []
    for bad in BAD_NAMES:
        ref = BindingRef(bad)
        missed += refuses(InvalidNameError, {
            f"write_binding({bad!r})": lambda ref=ref: run.write_binding(ref, "v", "let", "s"),
            f"read_binding({bad!r})": lambda ref=ref: run.read_binding(ref),
            f"resolve({bad!r})": lambda bad=bad: run.resolve(bad),
            f"binding_location({bad!r})": lambda ref=ref: run.binding_location(ref),
            f"grant_session({bad!r})": lambda ref=ref: run.grant_session(ref, "let", "s"),
            f"context {bad!r}": lambda ref=ref: run.grant_session(BindingRef("ok"), "let", "s",
                                                                  context=[ref]),
            f"push_frame({bad!r})": lambda bad=bad: run.push_frame(bad),
        })
    assert missed == []
    assert outside_files(tmp_path) == before
    assert run.bindings() == []


BAD_EIDS = ["1/../../../../../../escaped", "../../../../../../../escaped", "3", -1, 1.5]


def test_execution_ids_must_be_integers(tmp_path, run):
    before = outside_files(tmp_path)
    missed = []
    for eid in BAD_EIDS:
        ref = BindingRef("x", eid)  # type: ignore[arg-type]
        missed += refuses(InvalidNameError, {
            f"write_binding({eid!r})": lambda ref=ref: run.write_binding(ref, "v", "let", "s"),
            f"read_binding({eid!r})": lambda ref=ref: run.read_binding(ref),
            f"grant_session({eid!r})": lambda ref=ref: run.grant_session(ref, "let", "s"),
            f"context {eid!r}": lambda ref=ref: run.grant_session(BindingRef("ok"), "let", "s",
                                                                  context=[ref]),
        })
    assert missed == []
    assert outside_files(tmp_path) == before
    assert not (tmp_path / "escaped.md").exists()
    assert run.bindings() == []


def test_longest_allowed_names_work(stores, store, run):
    name = "n" * MAX_NAME
    run.write_binding(BindingRef(name), "v", "let", "s")
    run.write_binding(BindingRef(name, 12345), "scoped", "let", "s")
    grant = run.grant_session(BindingRef("out"), "let", "s",
                              agent=AgentRef("a" * MAX_NAME, "execution"))
    store.session(grant.token).write_memory("long agent")
    again = stores.open().open_run(run.id)
    assert again.read_binding(BindingRef(name)).value == "v"
    assert again.read_binding(BindingRef(name, 12345)).value == "scoped"
    assert again.memory(AgentRef("a" * MAX_NAME, "execution")) == "long agent"


# ---------------------------------------------------------------------------- agents

def test_bad_agent_names_are_refused(tmp_path, run):
    before = outside_files(tmp_path)
    missed = []
    for bad in BAD_NAMES:
        for scope in ("execution", "project", "user", "custom"):
            agent = AgentRef(bad, scope, "team/agent" if scope == "custom" else None)
            label = f"{scope} agent {bad!r}"
            missed += refuses(InvalidNameError, {
                f"grant {label}": lambda agent=agent: run.grant_session(
                    BindingRef("out"), "let", "s", agent=agent),
                f"memory {label}": lambda agent=agent: run.memory(agent),
                f"has_memory {label}": lambda agent=agent: run.has_memory(agent),
                f"segments {label}": lambda agent=agent: run.segments(agent),
            })
    assert missed == []
    assert outside_files(tmp_path) == before


def test_unknown_agent_scope_is_refused(run):
    with pytest.raises(ValueError, match="scope"):
        run.grant_session(BindingRef("out"), "let", "s", agent=AgentRef("a", "global"))


# ---------------------------------------------------------------------------- run ids

def test_bad_run_ids_are_refused(tmp_path, store, program):
    before = outside_files(tmp_path)
    missed = []
    for bad in BAD_RUN_IDS:
        calls = {f"open_run({bad!r})": lambda bad=bad: store.open_run(bad),
                 f"check_run_id({bad!r})": lambda bad=bad: check_run_id(bad)}
        if bad:  # an empty run_id means "make one up"
            calls[f"create_run({bad!r})"] = lambda bad=bad: store.create_run(program,
                                                                             run_id=bad)
        missed += refuses(InvalidNameError, calls)
    assert missed == []
    assert outside_files(tmp_path) == before
    assert store.list_runs() == []
    runs = tmp_path / "project" / ".prose" / "runs"
    assert not runs.exists() or list(runs.iterdir()) == []


def test_an_explicit_well_formed_run_id_is_used(store, program):
    run = store.create_run(program, run_id="20250101-120000-zz9zz9")
    assert run.id == "20250101-120000-zz9zz9"
    assert [info.id for info in store.list_runs()] == [run.id]


# ---------------------------------------------------------------------------- imports

def test_bad_import_handles_and_slugs_are_refused(tmp_path, run):
    before = outside_files(tmp_path)
    missed = []
    for bad in BAD_SLUGS:
        missed += refuses(InvalidNameError, {
            f"handle {bad!r}": lambda bad=bad: run.child(bad, "research", "output x = 1\n"),
            f"slug {bad!r}": lambda bad=bad: run.child("alice", bad, "output x = 1\n"),
        })
    assert missed == []
    assert outside_files(tmp_path) == before
    imports = Path(run.location) / "imports"
    assert not imports.exists() or list(imports.iterdir()) == []


def test_handle_and_slug_cannot_be_split_two_ways(run):
    """`a--b` + `c` and `a` + `b--c` would share the folder a--b--c."""
    child = run.child("a", "b--c", "output x = 1\n")
    assert child.id.endswith("/imports/a--b--c")
    with pytest.raises(InvalidNameError, match="'--'"):
        run.child("a--b", "c", "output x = 1\n")


def test_good_import_handles_and_slugs(run):
    for handle, slug, folder in [("@alice", "deep-research", "alice--deep-research"),
                                 ("bob_2", "v1.2", "bob_2--v1.2")]:
        child = run.child(handle, slug, "output x = 1\n")
        assert child.id == f"{run.id}/imports/{folder}"
        assert Path(child.location) == Path(run.location) / "imports" / folder


# ---------------------------------------------------------------------------- persist paths

def escapes(tmp_path: Path) -> list[str]:
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    link = tmp_path / "project" / "link-out"
    if not link.exists():
        link.symlink_to(outside, target_is_directory=True)
    return ["/etc", "/etc/openprose-agent", "../../x", "../outside/agent", str(outside),
            str(outside / "agent"), "link-out", "link-out/agent", "team/../../outside",
            "~", "~/notes", str(tmp_path / "home"), str(tmp_path / "home" / "prose-not-dot"),
            "~/.prose/../escape"]


def test_custom_persist_paths_outside_the_roots_are_refused(tmp_path, store, run):
    bad_paths = escapes(tmp_path)
    before = outside_files(tmp_path)
    for raw in bad_paths:
        agent = AgentRef("captain", "custom", raw)
        with pytest.raises(PathEscapeError):
            run.grant_session(BindingRef("out"), "let", "s", agent=agent)
        with pytest.raises(PathEscapeError):
            run.memory(agent)
    for raw in ("", "   ", "team/\x00", "team/\nx", "x" * 2000, None):
        with pytest.raises(InvalidNameError):
            run.grant_session(BindingRef("out"), "let", "s",
                              agent=AgentRef("captain", "custom", raw))
    assert outside_files(tmp_path) == before
    assert list((tmp_path / "outside").iterdir()) == []
    assert not Path("/etc/openprose-agent").exists()


def test_custom_persist_paths_inside_the_roots_are_used(tmp_path, store, run):
    project, home = tmp_path / "project", tmp_path / "home"
    inside = {
        "team/captain": project / "team" / "captain",
        "./agents/../team/second": project / "team" / "second",
        str(project / "absolute" / "third"): project / "absolute" / "third",
        str(home / ".prose" / "shared" / "fourth"): home / ".prose" / "shared" / "fourth",
        "~/.prose/shared/fifth": home / ".prose" / "shared" / "fifth",
    }
    for index, (raw, where) in enumerate(inside.items()):
        agent = AgentRef("captain", "custom", raw)
        grant = run.grant_session(BindingRef(f"out{index}"), "let", "s", agent=agent)
        handle = store.session(grant.token)
        handle.write_memory(f"memory {index}")
        assert handle.append_segment(f"segment {index}") == 1
        assert (where / "memory.md").read_text(encoding="utf-8") == f"memory {index}"
        assert (where / "captain-001.md").read_text(encoding="utf-8") == f"segment {index}"
        assert run.memory(agent) == f"memory {index}"


def test_contained_path_resolves_symlinks(tmp_path):
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (root / "inner-link").symlink_to(root / "real", target_is_directory=True)
    (root / "outer-link").symlink_to(tmp_path, target_is_directory=True)
    assert contained_path("inner-link/a", [root], root) == (root / "real" / "a").resolve()
    with pytest.raises(PathEscapeError):
        contained_path("outer-link/a", [root], root)
    assert os.path.islink(root / "outer-link")


def test_a_root_name_shaped_like_a_scoped_binding_is_never_written(run):
    """`a__1` at the root and `a` in execution 1 would be one file on the filesystem (and
    two rows in SQL): such names are refused for writing on every backend."""
    run.push_frame("blk")
    run.write_binding(BindingRef("a", 1), "INNER", "let", "s")
    for name in ("a__1", "a__01", "x__123"):
        missed = refuses(InvalidNameError, {
            f"write_binding({name!r})": lambda n=name: run.write_binding(BindingRef(n), "OUTER",
                                                                         "let", "s"),
            f"grant_session({name!r})": lambda n=name: run.grant_session(BindingRef(n), "let",
                                                                         "s"),
        })
        assert missed == []
    assert run.read_binding(BindingRef("a", 1)).value == "INNER"
    for fine in ("a__b", "a_1", "a__1x", "__1"):  # "__1" would be an empty name in 1
        run.write_binding(BindingRef(fine), "v", "let", "s")


def test_custom_persist_paths_in_hidden_folders_are_refused(tmp_path, store, run):
    """A memory file in .claude/agents/ is a Claude Code subagent, one in .prose/runs/ID/
    bindings/ another run's binding, one in .git/ the repository's: a persist path stays out
    of hidden folders below its root (~/.prose itself is a root, so its folders may be used)."""
    project = tmp_path / "project"
    for raw in (".claude/agents", ".git/hooks", ".prose", ".prose/runs/x/bindings",
                "team/.hidden", str(project / ".codex"), "./team/../.github/workflows"):
        agent = AgentRef("captain", "custom", raw)
        with pytest.raises(PathEscapeError, match="hidden folder"):
            run.grant_session(BindingRef("out"), "let", "s", agent=agent)
    assert not (project / ".claude").exists() and not (project / ".git").exists()
    assert not (project / "team").exists()


@pytest.mark.parametrize("backend", ["filesystem", "sqlite"])
def test_a_prose_folder_linking_out_of_the_project_is_refused(tmp_path, backend):
    """A cloned repository's `.prose` can be a link to ~/.ssh: runs, agents' memory and the
    settings would be kept there. One inside the project is the project's own."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / ".prose").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(PathEscapeError, match="outside the project"):
        open_store(project, backend, home=tmp_path / "home")
    assert list(elsewhere.iterdir()) == []
    (project / ".prose").unlink()
    (project / "state").mkdir()
    (project / ".prose").symlink_to(project / "state", target_is_directory=True)
    with open_store(project, backend, home=tmp_path / "home") as store:
        assert store.list_runs() == []


@pytest.mark.parametrize("backend", ["filesystem", "sqlite"])
def test_a_run_linked_out_of_prose_is_listed_damaged_and_hides_no_other(tmp_path, backend):
    """A link in .prose/runs/ to a run directory elsewhere made the whole listing fail:
    `prose runs` said 'no runs yet' beside a real run, and `prose clean` saw none."""
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    with open_store(project, backend, home=home) as store:
        real = store.create_run('output o = session "x"\n', "p.prose").id
    elsewhere = tmp_path / "elsewhere" / "20250101-000000-aaaaaa"
    shutil.copytree(project / ".prose" / "runs" / real, elsewhere)
    (project / ".prose" / "runs" / "20250101-000000-aaaaaa").symlink_to(
        elsewhere, target_is_directory=True)
    with open_store(project, backend, home=home) as store:
        listed = {info.id: info.status for info in store.list_runs()}
    assert listed == {real: "running", "20250101-000000-aaaaaa": "damaged"}
