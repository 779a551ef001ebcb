"""The run-state contract as code: one interface, three backends.

    store = open_store(project_root, "filesystem" | "sqlite" | "postgres")
    run = store.create_run(source, "program.prose")        # holds the VM capability
    grant = run.grant_session(BindingRef("research"), "let", 'let research = session "..."')
    store.session(grant.token).write_output("...")          # the session writes its binding
    run.complete_session(grant.token, key="0:research")      # one durable step, token ends

Names that become paths are validated; writes are atomic; who-writes-what is enforced by
capabilities (see :mod:`openprose.state.store`).
"""

from __future__ import annotations

from pathlib import Path

from openprose.state.config import (
    postgres_schema,
    postgres_url,
    read_env_file,
    settings,
    untrusted_env_keys,
)
from openprose.state.driver import DriverHolder, DriverLock, RunLocked
from openprose.state.errors import (
    BackendUnavailable,
    CapabilityError,
    DamagedState,
    DepthLimitExceeded,
    InvalidNameError,
    NotFoundError,
    PathEscapeError,
    RunNotFound,
    StateDiskFull,
    StateError,
)
from openprose.state.models import (
    FOLLOWED_STEP,
    MAX_VALUE_BYTES,
    ROOT,
    AgentRef,
    Binding,
    BindingRef,
    Completion,
    Frame,
    ImportRecord,
    JournalEntry,
    RunInfo,
    SessionGrant,
    SessionStart,
    StatementStatus,
    StateSnapshot,
    Usage,
)
from openprose.state.names import new_run_id
from openprose.state.render import render_state
from openprose.state.store import Run, SessionHandle, StateStore
from openprose.state.view import digest

BACKENDS = ("filesystem", "sqlite", "postgres")


def open_store(project_root: str | Path, backend: str = "filesystem", *,
               home: str | Path | None = None, postgres_url: str | None = None,
               schema: str | None = None) -> StateStore:
    """Open the state of the project at ``project_root`` on ``backend``. PostgreSQL's URL and
    schema default to the project's settings (``.prose/.env``, then the environment)."""
    root = Path(project_root).resolve()
    home_dir = Path(home).resolve() if home is not None else Path.home()
    state_dir = root / ".prose"
    if state_dir.is_symlink() and not state_dir.resolve().is_relative_to(root):
        # a cloned repository can carry .prose as a link to ~/.ssh or anywhere else
        raise PathEscapeError(f"{state_dir} is a link to {state_dir.resolve()}, outside the "
                              "project: state is never kept through a link that leaves it "
                              "(make .prose a directory of the project)")
    if backend == "filesystem":
        from openprose.state.backends.filesystem import FilesystemBackend

        return StateStore(FilesystemBackend(root, home_dir), root, home_dir, render_state, digest)
    if backend == "sqlite":
        from openprose.state.backends.sqlite import SqliteBackend

        return StateStore(SqliteBackend(root, home_dir), root, home_dir, render_state, digest)
    if backend == "postgres":
        from openprose.state.backends.postgres import PostgresBackend

        url = postgres_url or _postgres_url(root)
        if not url:
            raise BackendUnavailable(
                "no PostgreSQL URL: set OPENPROSE_POSTGRES_URL in .prose/.env or the "
                "environment (or DATABASE_URL)")
        return StateStore(PostgresBackend(root, home_dir, url, schema or postgres_schema(root)),
                          root, home_dir, render_state, digest)
    raise ValueError(f"unknown state backend {backend!r} (choose from {', '.join(BACKENDS)})")


_postgres_url = postgres_url

__all__ = [
    "BACKENDS",
    "FOLLOWED_STEP",
    "MAX_VALUE_BYTES",
    "ROOT",
    "AgentRef",
    "BackendUnavailable",
    "Binding",
    "BindingRef",
    "CapabilityError",
    "Completion",
    "DamagedState",
    "DepthLimitExceeded",
    "DriverHolder",
    "DriverLock",
    "Frame",
    "ImportRecord",
    "InvalidNameError",
    "JournalEntry",
    "NotFoundError",
    "PathEscapeError",
    "Run",
    "RunInfo",
    "RunLocked",
    "RunNotFound",
    "SessionGrant",
    "SessionHandle",
    "SessionStart",
    "StateDiskFull",
    "StateError",
    "StateSnapshot",
    "StateStore",
    "StatementStatus",
    "Usage",
    "new_run_id",
    "open_store",
    "read_env_file",
    "settings",
    "untrusted_env_keys",
]
