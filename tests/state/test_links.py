"""Links planted inside ``.prose`` (a cloned repository can carry them) are never followed out
of it: memory that is a link to a credentials file is not read, a linked ``bindings/``,
agent directory, run directory, ``journal.jsonl``, ``capabilities.jsonl`` or ``state.db``
is refused before anything is read or written through it."""

from __future__ import annotations

from pathlib import Path

import pytest

from openprose.state import (
    AgentRef,
    BindingRef,
    PathEscapeError,
    StateSnapshot,
    open_store,
)

SECRET = "aws_secret_access_key = do-not-read-me"
PROGRAM = 'let a = session "A"\noutput o = a\n'


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the project, holding a credentials file."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "credentials").write_text(SECRET)
    return directory


def _before(outside: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in outside.iterdir() if p.is_file()}


def _run(project: Path, home: Path, backend: str = "filesystem") -> tuple[str, Path]:
    with open_store(project, backend, home=home) as store:
        run = store.create_run(PROGRAM, "p.prose")
        grant = run.grant_session(BindingRef("a"), "let", 'let a = session "A"',
                                  agent=AgentRef("critic", "execution"))
        run.complete_session(grant.token, "0:a", value="A-out")
        return run.id, project / ".prose" / "runs" / run.id


@pytest.mark.parametrize("scope", ["execution", "project"])
def test_memory_linked_to_a_credentials_file_is_not_read(project, home, outside, scope):
    run_id, run_dir = _run(project, home)
    agents = run_dir / "agents" if scope == "execution" else project / ".prose" / "agents"
    (agents / "critic").mkdir(parents=True, exist_ok=True)
    (agents / "critic" / "memory.md").symlink_to(outside / "credentials")
    with open_store(project, home=home) as store:
        run = store.open_run(run_id)
        with pytest.raises(PathEscapeError, match="symbolic link"):
            run.memory(AgentRef("critic", scope))


def test_a_linked_agent_directory_is_refused(project, home, outside):
    run_id, _ = _run(project, home)
    (project / ".prose" / "agents").mkdir(parents=True)
    (project / ".prose" / "agents" / "critic").symlink_to(outside, target_is_directory=True)
    before = _before(outside)
    with open_store(project, home=home) as store:
        run = store.open_run(run_id)
        with pytest.raises(PathEscapeError, match="outside"):
            run.grant_session(BindingRef("b"), "let", "let b = session", agent=AgentRef(
                "critic", "project"))
        with pytest.raises(PathEscapeError):
            store.backend.write_memory(run_id, AgentRef("critic", "project"), "written")
    assert _before(outside) == before and not (outside / "memory.md").exists()


def test_linked_bindings_directory_is_refused(project, home, outside):
    run_id, run_dir = _run(project, home)
    (run_dir / "bindings" / "a.md").rename(outside / "a.md")
    (run_dir / "bindings").rmdir()
    (run_dir / "bindings").symlink_to(outside, target_is_directory=True)
    before = _before(outside)
    with open_store(project, home=home) as store, \
            pytest.raises(PathEscapeError, match="bindings is a link"):
        store.open_run(run_id)
    with open_store(project, home=home) as store:
        store.backend.contained(run_dir)  # the run directory itself is fine
        with pytest.raises(PathEscapeError):
            store.backend.put_binding(run_id, store.backend.get_binding(run_id, BindingRef(
                "a")), durable=False)
    assert _before(outside) == before


@pytest.mark.parametrize("log", ["journal.jsonl", "capabilities.jsonl"])
def test_a_linked_log_is_neither_read_nor_appended(project, home, outside, log):
    run_id, run_dir = _run(project, home)
    (run_dir / log).unlink()
    (run_dir / log).symlink_to(outside / "credentials")
    with open_store(project, home=home) as store, \
            pytest.raises(PathEscapeError, match="symbolic link"):
        run = store.open_run(run_id)
        run.record_intent("1:x", "h")
    assert (outside / "credentials").read_text() == SECRET


def test_a_linked_run_directory_is_refused(project, home, outside):
    run_id, run_dir = _run(project, home)
    moved = outside / "run"
    run_dir.rename(moved)
    run_dir.symlink_to(moved, target_is_directory=True)
    with open_store(project, home=home) as store, pytest.raises(PathEscapeError):
        store.open_run(run_id)


def test_state_md_link_is_replaced_not_written_through(project, home, outside):
    run_id, run_dir = _run(project, home)
    (run_dir / "state.md").unlink(missing_ok=True)
    (run_dir / "state.md").symlink_to(outside / "credentials")
    with open_store(project, home=home) as store:
        run = store.open_run(run_id)
        with pytest.raises(PathEscapeError):
            run.state_text()
        run.update_state(StateSnapshot())
        assert "# Execution State" in run.state_text()
    assert (outside / "credentials").read_text() == SECRET


def test_a_linked_state_db_is_refused(project, home, outside):
    run_id, run_dir = _run(project, home, "sqlite")
    (run_dir / "state.db").rename(outside / "state.db")
    (run_dir / "state.db").symlink_to(outside / "state.db")
    with open_store(project, "sqlite", home=home) as store, \
            pytest.raises(PathEscapeError, match="symbolic link"):
        store.open_run(run_id)


def test_a_linked_attachments_directory_is_refused(project, home, outside):
    run_id, run_dir = _run(project, home, "sqlite")
    (run_dir / "attachments").symlink_to(outside, target_is_directory=True)
    with open_store(project, "sqlite", home=home) as store:
        run = store.open_run(run_id)
        with pytest.raises(PathEscapeError, match="attachments is a link"):
            run.write_binding(BindingRef("big"), "z" * 200_000, "let", "let big")
    assert sorted(p.name for p in outside.iterdir()) == ["credentials"]


def test_a_linked_writing_directory_is_refused(project, home, outside):
    """Bindings are made in ``.prose/.writing`` and renamed in: a link there that leaves
    ``.prose`` is refused before a temp file is made through it."""
    run_id, _ = _run(project, home)
    writing = project / ".prose" / ".writing"
    if writing.exists():
        writing.rmdir()
    writing.symlink_to(outside, target_is_directory=True)
    before = _before(outside)
    with open_store(project, home=home) as store:
        run = store.open_run(run_id)
        with pytest.raises(PathEscapeError, match=r"\.writing is a link"):
            run.write_binding(BindingRef("b"), "B", "let", 'let b = "B"')
    assert _before(outside) == before
