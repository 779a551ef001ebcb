"""What the interpreter needs from the run's state, as one narrow interface.

:class:`StateJournal` implements it on :mod:`openprose.state`; the interpreter never talks to
the state layer directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from openprose.engine.parallel import JoinDecision
from openprose.engine.provider import ContextItem, SessionIO, Usage
from openprose.engine.values import Value

if TYPE_CHECKING:
    from openprose.engine.imports import Imported


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """What the journal needs to know to open a session's capability."""

    key: str
    input_hash: str
    binding: str | None
    kind: str
    execution_id: int | None
    source: str
    line: int
    context: tuple[tuple[str, int | None], ...] = ()
    agent: str | None = None
    persist: str | None = None
    items: tuple[ContextItem, ...] = ()
    #: The session's agent and permissions, recorded with its grant (for hosts' hooks).
    work: dict[str, Any] | None = None
    #: The token the provider's host will know the first attempt by, recorded with the grant.
    host_token: str | None = None


@dataclass(frozen=True, slots=True)
class Recorded:
    """A finished step found in the journal."""

    input_hash: str
    value: Value
    reason: str = ""


class OpenSession(Protocol):
    """A session in flight: its capability-bound IO, then exactly one of finish/abort."""

    io: SessionIO

    def binding_location(self, name: str, execution_id: int | None) -> str: ...

    def finish(self, output: str | None, usage: Usage) -> str: ...

    async def finish_batched(self, output: str | None, usage: Usage) -> str:
        """Like :meth:`finish`, committed together with other sessions finishing now."""
        ...

    def abort(self, error: str) -> None: ...


class Journal(Protocol):
    writes_wait: bool  # opening a session may block: do it off the event loop

    def session_result(self, key: str) -> Recorded | None: ...

    def open_session(self, spec: SessionSpec) -> OpenSession: ...

    async def open_session_batched(self, spec: SessionSpec) -> OpenSession:
        """Like :meth:`open_session`, written together with other sessions starting now."""
        ...

    def verdict(self, key: str) -> Recorded | None: ...

    def decision(self, key: str, branches: int) -> JoinDecision | None:
        """The join decision recorded at ``key`` (None: none, or it does not fit)."""

    def record_decision(self, key: str, decision: JoinDecision) -> None: ...

    def record_verdict(self, key: str, input_hash: str, value: bool | str, reason: str,
                       source: str, line: int) -> None: ...

    def bind(self, name: str, value: Value, kind: str, execution_id: int | None,
             source: str) -> None: ...

    def reuse(self, name: str, value: Value, kind: str, execution_id: int | None,
              source: str) -> None:
        """A finished session's result is used again: its binding must hold that value."""

    def location(self, name: str, execution_id: int | None) -> str: ...

    def has_memory(self, agent: str, persist: str) -> bool: ...

    def push_frame(self, block: str, args: dict[str, Value], parent: int | None,
                   max_depth: int, key: str) -> int:
        """Enter a block call at ``key`` (its call path); its execution id. A call an
        earlier run of the program entered at ``key`` keeps its execution id."""

    def pop_frame(self, execution_id: int) -> None: ...

    def note(self, key: str, status: str, source: str, line: int) -> None: ...

    def record_tool(self, key: str, call: dict[str, Any]) -> None:
        """One work-tool call of the session at ``key`` (allowed or refused), for the audit."""

    def child(self, handle: str, program_text: str) -> Journal: ...

    def record_imports(self, imports: dict[str, Imported]) -> None:
        """Register the programs this run imports (alias, source, hash, inputs, outputs)."""

    def finish(self, status: str, error: str | None) -> None: ...
