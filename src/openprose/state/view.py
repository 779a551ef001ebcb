"""What a run looks like from outside: its status, its steps placed in the program, the
constructs under way, its bindings, agents and call stack.

One :class:`RunView` feeds every rendering (``state.md``, ``prose show``, ``prose watch``
and the MCP state resource). :func:`load_view` builds it read-only from any backend, so a
second process can inspect a run while another drives it; :func:`view_of_run` builds it
from a run open in this process (the engine's own state.md).
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

from openprose.state.models import (
    AgentRef,
    Binding,
    BindingRef,
    Frame,
    JournalEntry,
    StatementStatus,
    Usage,
    final_result,
)
from openprose.state.program_map import (
    Enclosing,
    Placed,
    ProgramMap,
    driver_path,
    program_map,
)

if TYPE_CHECKING:
    from openprose.state.store import Run, StateStore

_RESULT_STATUS = {"completed": "complete", "failed": "failed", "cancelled": "cancelled"}
#: The embodied run's check of its program (the MCP server's follower): a failed result
#: names the statement the program failed at and why; a later completed one clears it.
CHECKER_KEY = "mcp:checker"
_LOCATION = re.compile(r"^(?:[^\s:]+):(\d+):(\d+): ")
ENDED = ("completed", "failed", "interrupted")


@dataclass(slots=True)
class Step:
    """One journal key: a session (or a note about one) or a judgment."""

    key: str
    kind: str  # session | verdict
    line: int
    end_line: int
    status: str  # executing | complete | failed | cancelled | interrupted | judged
    enclosing: tuple[Enclosing, ...] = ()
    binding: BindingRef | None = None
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    started_at: float | None = None
    ended_at: float | None = None
    verdict: Any = None
    reason: str = ""
    #: Intents recorded for the key: more than one when the step was started again (a retry,
    #: a resumed run).
    attempts: int = 0

    @property
    def duration(self) -> float | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return max(0.0, self.ended_at - self.started_at)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"key": self.key, "kind": self.kind, "line": self.line,
                                "status": self.status}
        if self.binding is not None:
            data["binding"] = {"name": self.binding.name,
                               "execution_id": self.binding.execution_id}
        if self.error:
            data["error"] = self.error
        if self.kind == "verdict":
            data["verdict"], data["reason"] = self.verdict, self.reason
        if self.started_at is not None:
            data["started_at"] = self.started_at
        if self.ended_at is not None:
            data["ended_at"] = self.ended_at
        if self.duration is not None:
            data["duration_s"] = round(self.duration, 3)
        if self.usage.input_tokens or self.usage.output_tokens:
            data["tokens"] = self.usage.input_tokens + self.usage.output_tokens
        return data


@dataclass(slots=True)
class BindingInfo:
    ref: BindingRef
    kind: str
    location: str
    size: int | None = None
    preview: str | None = None


@dataclass(slots=True)
class RunView:
    id: str
    backend: str
    program_path: str | None
    source: str
    status: str  # running | completed | failed | interrupted
    started: str
    updated: str
    error: str | None
    steps: list[Step]
    frames: list[Frame]
    bindings: Sequence[BindingInfo]
    agents: list[tuple[AgentRef, str]]
    usage: Usage
    live: dict[int, StatementStatus] = field(default_factory=dict)
    #: The sessions' work-tool calls (journal records of kind "tool"), in order.
    tools: list[JournalEntry] = field(default_factory=list)
    #: The latest record of each ``run:`` key (how the run was driven, its inputs) and of
    #: :data:`CHECKER_KEY`.
    notes: dict[str, JournalEntry] = field(default_factory=dict)
    #: The lines of the program's session statements as the digest has them (None: the
    #: source is compiled to find them, see :attr:`ProgramMap.session_lines`).
    session_lines: list[int] | None = None

    @property
    def error_line(self) -> int | None:
        """The program line the run's error names (``file:line:col: ...``)."""
        match = _LOCATION.match(self.error or "")
        return int(match.group(1)) if match else None

    @property
    def failed_step(self) -> Step | None:
        failed = [s for s in self.steps if s.status == "failed"]
        return failed[-1] if failed else None

    @property
    def failed_line(self) -> int | None:
        """The line of the statement that failed: a failed session's, else the error's."""
        step = self.failed_step
        return step.line if step is not None and step.line else self.error_line

    @property
    def finished(self) -> bool:
        return self.status in ENDED

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.id, "backend": self.backend, "program": self.program_path,
            "status": self.status, "started": self.started, "updated": self.updated,
            "error": self.error, "failed_line": self.failed_line,
            "sessions": self.usage.sessions,
            "tokens": self.usage.input_tokens + self.usage.output_tokens,
            "cost_usd": round(self.usage.cost_usd, 6),
            "steps": [step.to_dict() for step in self.steps],
            "bindings": [{"name": b.ref.name, "execution_id": b.ref.execution_id,
                          "kind": b.kind, "location": b.location, "size": b.size,
                          "preview": b.preview} for b in self.bindings],
            "agents": [{"name": a.name, "scope": a.scope, "location": where}
                       for a, where in self.agents],
            "call_stack": [{"execution_id": f.execution_id, "block": f.block,
                            "depth": f.depth, "status": f.status}
                           for f in self.frames if f.status == "executing"],
            **({"tool_calls": [{"session": entry.key, **entry.meta} for entry in self.tools]}
               if self.tools else {}),
        }


def _is_note(key: str) -> bool:
    return key.startswith("run:") or key == CHECKER_KEY


def build_steps(entries: list[JournalEntry], source: str, running: bool, *,
                enclosing: bool = True) -> list[Step]:
    """Fold journal records (intents, results, verdicts, in order) into one step per key;
    ``enclosing``: with the constructs around each step (placing every key costs time)."""
    places = program_map(source)
    steps: dict[tuple[str, str], Step] = {}
    for entry in entries:
        if entry.kind not in ("intent", "result", "verdict"):
            continue
        path = entry.key
        if ":" in path:  # another driver's record (the MCP server's): placed by its statement
            placeable = driver_path(path)
            if placeable is None:
                continue
            path = placeable
        slot = ("verdict" if entry.kind == "verdict" else "step", entry.key)
        at = entry.meta.get("at") if entry.meta else None
        step = steps.get(slot)
        if step is None:
            placed = places.place(path) if enclosing else Placed(*places.lines(path), ())
            step = steps[slot] = Step(entry.key, "verdict" if entry.kind == "verdict"
                                      else "session", placed.line, placed.end_line,
                                      "executing", placed.enclosing, started_at=at)
        if entry.kind == "intent":
            step.status, step.error, step.started_at, step.ended_at = "executing", None, at, None
            step.attempts += 1
        elif entry.kind == "result":
            if entry.status == "completed" and entry.binding is None:
                continue  # a note (such as a step finished inside a block call)
            if step.status == "complete" and entry.status != "completed":
                continue  # a completed result is final
            step.status = _RESULT_STATUS.get(entry.status, entry.status)
            step.binding = entry.binding or step.binding
            step.error = entry.error
            step.usage = entry.usage
            step.ended_at = at
        else:
            step.status, step.verdict, step.reason, step.ended_at = (
                "judged", entry.value, entry.reason, at)
    if not running:
        for step in steps.values():
            if step.status == "executing":
                step.status = "interrupted"
    return list(steps.values())


def run_journal(store: StateStore, run_id: str,
                own: list[JournalEntry] | None = None) -> list[JournalEntry]:
    """A run's journal (``own``: as already read) with those of the imported programs it
    called (their runs nested under it, at any depth), in the order they were written: the
    run's sessions are all of them. An import's keys begin with its call site's path, so its
    steps are placed at the call."""
    backend = store.backend
    entries = backend.read_journal(run_id) if own is None else own
    pending = backend.list_children(run_id)
    if not pending:
        return entries
    entries = list(entries)
    while pending:
        child = pending.pop()
        entries += backend.read_journal(child)
        pending += backend.list_children(child)
    return sorted(entries, key=lambda entry: (entry.meta or {}).get("at") or 0.0)


def usage_of(entries: list[JournalEntry]) -> Usage:
    """Sessions, tokens and cost of a run's completed sessions (its latest result per key)."""
    latest: dict[str, JournalEntry] = {}
    for entry in entries:
        if entry.kind == "result" and not final_result(latest.get(entry.key), entry):
            latest[entry.key] = entry
    usage = Usage()
    for entry in latest.values():
        if entry.status == "completed" and entry.binding is not None:
            usage = usage + Usage(entry.usage.input_tokens, entry.usage.output_tokens,
                                  entry.usage.cost_usd, 1)
    return usage


def _preview(value: str, width: int = 60) -> str:
    text = " ".join(value.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def load_view(store: StateStore, run_id: str, *, values: bool = True) -> RunView:
    """Read a run without opening it for writing (no repair, no capability): safe while
    another process drives it. ``values``: read binding values for sizes and previews;
    without them an ended run is read from its digest when it has one (see :func:`digest`)."""
    from openprose.state.names import check_run_id

    check_run_id(run_id)
    backend = store.backend
    record = backend.load_run(run_id)
    running = record.status not in ENDED
    if not values:
        with no_collection():
            found = _digest_of(store, record)
            if found is not None:
                return _view_of_digest(store, record, found)
    entries = run_journal(store, run_id)
    steps = build_steps(entries, record.program_source, running)
    bindings = []
    for binding in backend.list_bindings(run_id):
        bindings.append(_binding_info(store, run_id, binding, values))
    agents: dict[AgentRef, None] = {}
    for grant in backend.list_capabilities(run_id):
        if grant.get("agent"):
            agents[AgentRef(*grant["agent"])] = None
    usage = usage_of(entries)
    return RunView(record.id, store.kind, record.program_path, record.program_source,
                   record.status, record.started, record.updated, record.error, steps,
                   sorted(backend.list_frames(run_id), key=lambda f: f.execution_id),
                   bindings, _agent_locations(store, run_id, agents), usage,
                   tools=[entry for entry in entries if entry.kind == "tool"],
                   notes={e.key: e for e in entries if _is_note(e.key)})


# ----------------------------------------------------------------------------- digests
#: The digest's layout; a digest of another version is not read (the journal is).
DIGEST_VERSION = 1


def digest(run: Run, status: str, error: str | None) -> str:
    """What a view of the run, once ended as ``status``, reads instead of its journal,
    bindings, frames and grants (a 20,000-session run's view then costs one small read):
    its steps with their lines, usage (its imports' too), binding names and kinds, agents,
    the frames still open, work-tool calls and ``run:`` notes. Written by the driver as the
    run ends, from what it holds in memory; no value is in it."""
    entries = run_journal(run.store, run.id, run.step_entries())
    steps = build_steps(entries, run.program_source, False, enclosing=False)
    steps.sort(key=lambda s: (s.started_at or 0.0, s.key))
    usage = usage_of(entries)
    return json.dumps({
        "version": DIGEST_VERSION, "backend": run.store.kind, "status": status, "error": error,
        "usage": [usage.input_tokens, usage.output_tokens, usage.cost_usd, usage.sessions],
        "steps": [[s.key, s.kind, s.line, s.end_line, s.status, s.started_at, s.ended_at,
                   s.attempts, s.binding and [s.binding.name, s.binding.execution_id],
                   s.error, s.usage.input_tokens, s.usage.output_tokens, s.usage.cost_usd,
                   s.verdict, s.reason] for s in steps],
        "bindings": [[ref.name, ref.execution_id, kind] for ref, kind in run.binding_index()],
        "agents": [[a.name, a.scope, a.path] for a in run.agents()],
        "frames": [[f.execution_id, f.block, f.depth, f.parent, f.status, f.key]
                   for f in run.frames() if f.status == "executing"],
        "tools": [[e.key, e.status, e.meta] for e in run.tool_calls()],
        "notes": {e.key: [e.kind, e.status, e.meta, e.error] for e in run.journal_entries()
                  if _is_note(e.key)},
        "session_lines": program_map(run.program_source).session_lines,
    }, separators=(",", ":"))


@contextmanager
def no_collection() -> Iterator[None]:
    """Without the cyclic collector's passes while a big run is read: a 20,000-session run's
    digest reads into some 400,000 objects, none of them garbage, and the passes that
    allocating them sets off cost as much as the reading itself."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _digest_of(store: StateStore, record: Any) -> dict[str, Any] | None:
    """The run's digest if this backend wrote it and it describes the run as its record
    has it now (a resumed run's digest is of an earlier end: not read until the run ends
    again and writes another)."""
    if record.status not in ENDED:
        return None
    text = store.backend.read_digest(record.id)
    if text is None:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None  # damaged: the journal is read instead
    if not isinstance(found, dict) or found.get("version") != DIGEST_VERSION or \
            (found.get("backend"), found.get("status"), found.get("error")) != \
            (store.kind, record.status, record.error):
        return None  # another backend's (a run exported shares its directory), or older
    return found


def run_usage(store: StateStore, record: Any) -> Usage:
    """A run's usage with its imports', from its digest when it has one: the one count of
    sessions, tokens and cost every command and view shows."""
    with no_collection():
        found = _digest_of(store, record)
    if found is not None:
        return Usage(*found["usage"])
    return usage_of(run_journal(store, record.id))


def _view_of_digest(store: StateStore, record: Any, found: dict[str, Any]) -> RunView:
    places: ProgramMap | None = None  # compiled only to place a failed step: a first visit skips compiling
    steps = []
    for (key, kind, line, end_line, status, started, ended, attempts, binding, error,
         tokens_in, tokens_out, cost, verdict, reason) in found["steps"]:
        enclosing: tuple[Enclosing, ...] = ()
        if status in ("failed", "cancelled", "interrupted"):  # what the view shows around
            path = driver_path(key) if ":" in key else key
            if path:
                places = places or program_map(record.program_source)
                enclosing = places.place(path).enclosing
        steps.append(Step(key, kind, line, end_line, status, enclosing,
                          BindingRef(*binding) if binding else None, error,
                          Usage(tokens_in, tokens_out, cost), started, ended, verdict, reason,
                          attempts))
    bindings = _Bindings(store, record.id, found["bindings"])
    agents = {AgentRef(*agent): None for agent in found["agents"]}
    frames = [Frame(eid, block, depth, parent, status=status, key=key)
              for eid, block, depth, parent, status, key in found["frames"]]
    tools = [JournalEntry(key, "tool", status=status, meta=meta)
             for key, status, meta in found["tools"]]
    notes = {key: JournalEntry(key, kind, status=status, error=error, meta=meta)
             for key, (kind, status, meta, error) in found["notes"].items()}
    return RunView(record.id, store.kind, record.program_path, record.program_source,
                   record.status, record.started, record.updated, record.error, steps, frames,
                   bindings, _agent_locations(store, record.id, agents), Usage(*found["usage"]),
                   tools=tools, notes=notes, session_lines=found.get("session_lines"))


class _Bindings(Sequence[BindingInfo]):
    """A digest's bindings, made into :class:`BindingInfo` as they are read: a page of
    50 of a run's 30,000 costs 50."""

    def __init__(self, store: StateStore, run_id: str, rows: list[list[Any]]) -> None:
        self.store, self.run_id, self.rows = store, run_id, rows

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, index: int) -> BindingInfo: ...
    @overload
    def __getitem__(self, index: slice) -> list[BindingInfo]: ...

    def __getitem__(self, index: int | slice) -> BindingInfo | list[BindingInfo]:
        if isinstance(index, slice):
            return [self._info(row) for row in self.rows[index]]
        return self._info(self.rows[index])

    def _info(self, row: list[Any]) -> BindingInfo:
        ref = BindingRef(row[0], row[1])
        return BindingInfo(ref, row[2], self.store.backend.binding_location(self.run_id, ref))


def _binding_info(store: StateStore, run_id: str, binding: Binding, values: bool
                  ) -> BindingInfo:
    location = store.backend.binding_location(run_id, binding.ref)
    if not values:
        return BindingInfo(binding.ref, binding.kind, location)
    return BindingInfo(binding.ref, binding.kind, location, len(binding.value.encode()),
                       _preview(binding.value))


def _agent_locations(store: StateStore, run_id: str, agents: dict[AgentRef, None]
                     ) -> list[tuple[AgentRef, str]]:
    found = []
    for agent in sorted(agents, key=lambda a: (a.name, a.scope, a.path or "")):
        where = store.backend.memory_location(run_id, agent)
        found.append((agent, where.removesuffix("memory.md")))
    return found


def view_of_run(run: Run, live: tuple[StatementStatus, ...] = (), *,
                status: str | None = None, error: str | None = None) -> RunView:
    """The view of a run open in this process, from what it holds in memory (the engine
    renders state.md from it while the run goes on)."""
    record = run.backend.load_run(run.id) if status is None else None
    status = status or (record.status if record else "running")
    error = error if record is None else record.error
    running = status not in ENDED
    steps = build_steps(run.journal_entries(), run.program_source, running)
    bindings = [BindingInfo(ref, kind, run.binding_location(ref))
                for ref, kind in run.binding_index()]
    agents = {agent: None for agent in run.agents()}
    return RunView(run.id, run.store.kind, run.program_path, run.program_source, status,
                   run.record.started, record.updated if record else run.record.updated,
                   error, steps, run.frames(), bindings,
                   _agent_locations(run.store, run.id, agents), run.usage_totals(),
                   {s.line: s for s in live}, run.tool_calls())


__all__ = ["CHECKER_KEY", "BindingInfo", "RunView", "Step", "build_steps", "digest", "load_view",
           "no_collection", "run_journal", "run_usage", "usage_of", "view_of_run"]
