"""What a storage backend provides. The contract's rules live in :mod:`openprose.state.store`;
a backend only stores and fetches, atomically."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from openprose.state.driver import DriverHolder
from openprose.state.errors import StateError
from openprose.state.models import (
    AgentRef,
    Binding,
    BindingRef,
    Frame,
    ImportRecord,
    JournalEntry,
    StateSnapshot,
)
from openprose.state.records import RunRecord, entry_from_data, parse_json

LARGE_VALUE = 100 * 1024  # SQL backends move larger values to attachments/


@dataclass(frozen=True, slots=True)
class CommitStep:
    """One finished session to commit. ``stored``: the session already wrote the binding
    exactly so, and it is not written again."""

    binding: Binding
    entry: JournalEntry
    ended_grant: dict[str, Any]
    stored: bool = False


class Backend(ABC):
    name: str
    #: Whether a small write can wait on other writers or the network (SQL backends), as
    #: opposed to a local append that returns at once (filesystem).
    writes_wait: bool = True

    # runs
    @abstractmethod
    def create_run(self, record: RunRecord) -> None: ...
    @abstractmethod
    def load_run(self, run_id: str) -> RunRecord: ...
    @abstractmethod
    def list_runs(self) -> list[RunRecord]: ...
    @abstractmethod
    def update_run(self, run_id: str, *, status: str, error: str | None) -> None: ...
    @abstractmethod
    def run_location(self, run_id: str) -> str: ...
    @abstractmethod
    def delete_run(self, run_id: str, *, keep_shared: bool = False) -> None:
        """Remove a top-level run with its import runs and execution-scoped agents, so that
        no listing shows any part of it afterwards. The run's directory may also hold a copy
        of the run on another backend (``prose export`` keeps the id): then only this
        backend's own files go, and ``keep_shared`` says such a copy exists elsewhere (in
        PostgreSQL, which the directory cannot show)."""
    @abstractmethod
    def list_children(self, run_id: str) -> list[str]:
        """Ids of the import runs directly under ``run_id``."""
    @abstractmethod
    def list_agents(self, run_id: str) -> list[str]:
        """Names of the execution-scoped agents with memory or segments in this run."""
    @abstractmethod
    def lock_driver(self, run_id: str, holder: DriverHolder) -> Callable[[], None]:
        """Take ``run_id``'s driver lock for ``holder`` without waiting; returns what
        releases it. Raises :class:`~openprose.state.driver.RunLocked` naming the holder."""
    @abstractmethod
    def put_import(self, run_id: str, record: ImportRecord) -> None: ...
    @abstractmethod
    def list_imports(self, run_id: str) -> list[ImportRecord]: ...
    def repair(self, run_id: str) -> list[JournalEntry] | None:
        """Bring derived data back in line with the durable journal after a crash; the
        run's journal (as :meth:`read_journal` gives it) when it was read whole for that,
        so that loading the run need not read it again."""
        return None
    def rebuild_run(self, run_id: str, damage: StateError) -> RunRecord:
        """A run record that cannot be read, rebuilt from what else is stored; raises
        ``damage`` when it cannot be."""
        raise damage

    # bindings
    @abstractmethod
    def put_binding(self, run_id: str, binding: Binding, *, durable: bool) -> None: ...
    @abstractmethod
    def get_binding(self, run_id: str, ref: BindingRef) -> Binding | None: ...
    @abstractmethod
    def list_bindings(self, run_id: str) -> list[Binding]: ...
    @abstractmethod
    def binding_location(self, run_id: str, ref: BindingRef) -> str: ...

    # journal
    @abstractmethod
    def append_journal(self, run_id: str, entry: JournalEntry, *, durable: bool) -> None: ...
    @abstractmethod
    def commit(self, run_id: str, steps: list[CommitStep]) -> None:
        """Finished sessions (binding, result record, ended grant) as one durable step."""
    @abstractmethod
    def read_journal(self, run_id: str) -> list[JournalEntry]: ...
    def start_sessions(self, run_id: str, intents: list[JournalEntry],
                       grants: list[dict[str, Any]]) -> None:
        """Intent records and session grants of sessions starting together (not durable)."""
        for entry in intents:
            self.append_journal(run_id, entry, durable=False)
        for grant in grants:
            self.put_capability(run_id, grant)

    # frames and capabilities
    @abstractmethod
    def put_frame(self, run_id: str, frame: Frame) -> None: ...
    @abstractmethod
    def list_frames(self, run_id: str) -> list[Frame]: ...
    @abstractmethod
    def put_capability(self, run_id: str, grant: dict[str, Any]) -> None: ...
    @abstractmethod
    def find_capability(self, token_hash: str, run_id: str | None = None
                        ) -> tuple[str, dict[str, Any]] | None:
        """The stored grant with this hash (``run_id``: the run known to hold it)."""
    @abstractmethod
    def list_capabilities(self, run_id: str) -> list[dict[str, Any]]: ...

    # agents
    @abstractmethod
    def read_memory(self, run_id: str, agent: AgentRef) -> str | None: ...
    @abstractmethod
    def write_memory(self, run_id: str, agent: AgentRef, text: str) -> None: ...
    @abstractmethod
    def append_segment(self, run_id: str, agent: AgentRef, text: str) -> int: ...
    @abstractmethod
    def list_segments(self, run_id: str, agent: AgentRef) -> list[tuple[int, str]]: ...
    @abstractmethod
    def memory_location(self, run_id: str, agent: AgentRef) -> str: ...
    @abstractmethod
    def segment_location(self, run_id: str, agent: AgentRef, number: int) -> str: ...
    def next_segment(self, run_id: str, agent: AgentRef) -> int:
        segments = self.list_segments(run_id, agent)
        return (segments[-1][0] + 1) if segments else 1

    # state.md
    @abstractmethod
    def write_state(self, run_id: str, text: str, snapshot: StateSnapshot) -> None: ...

    def end_run(self, run_id: str, *, status: str, error: str | None, text: str,
                snapshot: StateSnapshot) -> None:
        """The run's end: its status (durably) and its last state.md. A backend that can
        write both at once does (SQL: one round trip, where a run made two)."""
        self.update_run(run_id, status=status, error=error)
        self.write_state(run_id, text, snapshot)

    @abstractmethod
    def read_state(self, run_id: str) -> str: ...

    # the digest of an ended run (state.view.digest): what a view of it reads first
    @abstractmethod
    def write_digest(self, run_id: str, text: str) -> None: ...
    @abstractmethod
    def read_digest(self, run_id: str, start: int = 0, end: int | None = None
                    ) -> bytes | None:
        """Bytes ``start`` to ``end`` (its end: None) of the run's digest; None: it has none.
        A view reads the digest's head and the rows of one page, not the whole of it."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    def release(self, run_id: str) -> None:  # noqa: B027 - optional hook
        """Close what this process holds open for ``run_id`` and its import runs (files,
        connections); a later call opens it again. A long-lived process calls it when a run
        ends, so its descriptors do not grow with the runs it served."""


def segment_name(agent: str, number: int) -> str:
    return f"{agent}-{number:03d}.md"


def entry_to_json(entry: JournalEntry) -> str:
    """Compact JSON for a journal record: fields at their defaults are left out."""
    data: dict[str, Any] = {"key": entry.key, "kind": entry.kind}
    for name, default in (("input_hash", ""), ("status", ""), ("value", None),
                          ("reason", ""), ("error", None)):
        if getattr(entry, name) != default:  # an empty value "" is kept: it is not None
            data[name] = getattr(entry, name)
    if entry.meta:
        data["meta"] = entry.meta
    if entry.binding is not None:
        data["binding"] = [entry.binding.name, entry.binding.execution_id]
    usage = {name: getattr(entry.usage, name) for name in USAGE_FIELDS
             if getattr(entry.usage, name)}
    if usage:
        data["usage"] = usage
    return json.dumps(data, separators=(",", ":"), default=str)


def entry_from_json(text: str | bytes, where: str) -> JournalEntry:
    """A journal record read back (``where``: the file and line, or the row, for errors)."""
    return entry_from_data(parse_json(text, where, "journal record"), where)


def grant_to_json(grant: dict[str, Any]) -> str:
    return json.dumps(grant, separators=(",", ":"))


USAGE_FIELDS = ("input_tokens", "output_tokens", "cost_usd", "sessions")
