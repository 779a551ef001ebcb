"""Plain records exchanged with the state layer."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

ROOT = 0  # execution id of the root scope (ruling 4: distinct from every frame, which start at 1)
KINDS = frozenset({"input", "output", "let", "const", "param", "anonymous"})
AGENT_SCOPES = frozenset({"execution", "project", "user", "custom"})
#: The largest text taken from outside as one value (a binding, an input, a memory, any tool
#: argument): a client sending more is refused before anything is read into the run, so one
#: call cannot exhaust a shared server's memory or disk.
MAX_VALUE_BYTES = 10 * 1024 * 1024
#: A step an embodied host did, noted by the MCP server under the engine's key for it
#: (``FOLLOWED_STEP + key``): meta ``session`` (the session's own journal key) and ``hash``,
#: or ``value``, ``reason`` and ``hash`` for a verdict. A resumed engine reuses them.
FOLLOWED_STEP = "mcp:follow:"


def utc_now() -> str:
    """The time stamp every record carries: UTC to the second, ISO 8601."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class BindingRef:
    """A binding's identity: its name and the execution id of its frame (None = root)."""

    name: str
    execution_id: int | None = None

    @property
    def eid(self) -> int:
        return self.execution_id or ROOT

    @property
    def file_name(self) -> str:
        return f"{self.name}__{self.execution_id}.md" if self.execution_id else f"{self.name}.md"


@dataclass(frozen=True, slots=True)
class Binding:
    name: str
    execution_id: int | None
    kind: str
    source: str
    value: str
    location: str = ""

    @property
    def ref(self) -> BindingRef:
        return BindingRef(self.name, self.execution_id)


@dataclass(frozen=True, slots=True)
class Frame:
    execution_id: int
    block: str
    depth: int
    parent: int | None = None
    args: dict[str, str] = field(default_factory=dict)
    status: str = "executing"
    key: str | None = None  # the call's place in the run: a resumed run enters it again


@dataclass(frozen=True, slots=True)
class AgentRef:
    """Where a persistent agent's memory lives: execution | project | user | custom (path)."""

    name: str
    scope: str = "execution"
    path: str | None = None

    @classmethod
    def of(cls, agent: str, persist: str) -> AgentRef:
        """The memory of ``agent`` whose ``persist:`` reads ``persist`` (execution, project,
        user, or a path: a custom location)."""
        if persist in ("execution", "project", "user"):
            return cls(agent, persist)
        return cls(agent, "custom", persist)


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    sessions: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens,
                     self.output_tokens + other.output_tokens,
                     self.cost_usd + other.cost_usd, self.sessions + other.sessions)


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One durable-execution record, keyed by a stable statement key."""

    key: str
    kind: str  # intent | result | verdict | decision | note
    input_hash: str = ""
    status: str = ""
    binding: BindingRef | None = None
    value: Any = None
    reason: str = ""
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    meta: dict[str, Any] = field(default_factory=dict)


def final_result(previous: JournalEntry | None, entry: JournalEntry) -> bool:
    """Whether ``previous`` stays the step's result although ``entry`` came later: a
    completed result is final (a cancellation noted after the commit landed, say, never
    downgrades it)."""
    return (previous is not None and previous.kind == "result"
            and previous.status == "completed" and entry.kind == "result"
            and entry.status != "completed")


@dataclass(frozen=True, slots=True)
class SessionStart:
    """A session about to call its model: the intent to record (``key``, ``input_hash``)
    and the capability to grant (its binding, context and persistent agent)."""

    key: str
    input_hash: str
    binding: BindingRef
    kind: str
    source: str
    context: tuple[BindingRef, ...] = ()
    agent: AgentRef | None = None
    meta: dict[str, Any] | None = None
    #: Kept with the grant: the session's agent and permissions (a host's hook reads them).
    work: dict[str, Any] | None = None
    #: The token a host knows this session by (a guided run's item token), kept hashed with
    #: the grant in the same write (:meth:`Run.tag_grant` notes one given later).
    host_token: str | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """A finished session to commit: its token, its stable statement key and its output
    (``value``; None when the session wrote its binding itself)."""

    token: str
    key: str
    input_hash: str = ""
    value: str | None = None
    usage: Usage | None = None
    meta: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class SessionGrant:
    """What the VM hands a session: its token and where things are."""

    token: str
    binding: BindingRef
    binding_location: str
    context_locations: dict[str, str]
    memory_location: str | None = None
    segment_location: str | None = None


@dataclass(frozen=True, slots=True)
class StatementStatus:
    """Status of one statement for state.md: its lines in the program and what happened."""

    line: int
    end_line: int
    status: str  # executing | complete | retrying | not_entered | next | failed | cancelled
    binding: str | None = None
    attempt: int = 0
    max_attempts: int = 0


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    statuses: tuple[StatementStatus, ...] = ()
    active: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ImportRecord:
    """A program a run imports with ``use``: where it came from and what it takes and gives."""

    alias: str
    source_url: str
    content_hash: str
    inputs: dict[str, str] = field(default_factory=dict)  # name -> description
    outputs: tuple[str, ...] = ()
    fetched_at: str = ""


@dataclass(frozen=True, slots=True)
class RunInfo:
    id: str
    status: str
    program_path: str | None
    started: str
    updated: str
