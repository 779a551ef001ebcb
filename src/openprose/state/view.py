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
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, overload

from openprose.state.errors import DamagedState
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
    #: The session's work-tool calls (journal records of kind "tool"), in order.
    tools: list[JournalEntry] = field(default_factory=list)

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
    steps: Sequence[Step]
    frames: list[Frame]
    bindings: Sequence[BindingInfo]
    agents: list[tuple[AgentRef, str]]
    usage: Usage
    live: dict[int, StatementStatus] = field(default_factory=dict)
    #: The sessions' work-tool calls (journal records of kind "tool"), in order.
    tools: Sequence[JournalEntry] = field(default_factory=list)
    #: The latest record of each ``run:`` key (how the run was driven, its inputs) and of
    #: :data:`CHECKER_KEY`.
    notes: dict[str, JournalEntry] = field(default_factory=dict)
    #: The lines of the program's session statements as the digest has them (None: the
    #: source is compiled to find them, see :attr:`ProgramMap.session_lines`).
    session_lines: list[int] | None = None
    #: The steps summed up (:func:`summarize`) as the digest has them (None: made from
    #: :attr:`steps` when asked, see :func:`run_summary`).
    summary: dict[str, Any] | None = None
    #: The sessions in the order they started, as the digest has them (read a page at a
    #: time; None: sorted from :attr:`steps`, see :func:`sessions_of`).
    sessions: Sequence[Step] | None = None

    @property
    def error_line(self) -> int | None:
        """The program line the run's error names (``file:line:col: ...``)."""
        return _failed_line((), self.error)

    @property
    def failed_line(self) -> int | None:
        """The line of the statement that failed: a failed session's, else the error's."""
        if self.summary is not None:
            return self.summary["failed_line"]
        return _failed_line(self.steps, self.error)

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


def load_view(store: StateStore, run_id: str, *, values: bool = True, head: bool = False
              ) -> RunView:
    """Read a run without opening it for writing (no repair, no capability): safe while
    another process drives it. ``values``: read binding values for sizes and previews;
    without them an ended run is read from its digest when it has one (see :func:`digest`).
    ``head``: of the digest, only its head is read now (the summary, counts, notes); its
    steps, sessions, bindings and tool calls as they are asked for, a slice at a time."""
    from openprose.state.names import check_run_id

    check_run_id(run_id)
    backend = store.backend
    record = backend.load_run(run_id)
    running = record.status not in ENDED
    if not values:
        with no_collection():
            found = _digest_head(store, record)
            if found is not None:
                return _view_of_digest(store, record, found, whole=not head)
    entries = run_journal(store, run_id)
    steps = build_steps(entries, record.program_source, running)
    tools = [entry for entry in entries if entry.kind == "tool"]
    _attach_tools(steps, tools)
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
                   bindings, _agent_locations(store, run_id, agents), usage, tools=tools,
                   notes={e.key: e for e in entries if _is_note(e.key)})


def _attach_tools(steps: list[Step], tools: list[JournalEntry]) -> list[JournalEntry]:
    """Each session's tool calls onto its step; those of no session are returned."""
    sessions = {s.key: s for s in steps if s.kind == "session"}
    left = []
    for entry in tools:
        step = sessions.get(entry.key)
        if step is None:
            left.append(entry)
        else:
            step.tools.append(entry)
    return left


def _failed_line(steps: Iterable[Step], error: str | None) -> int | None:
    """The line of the statement that failed: the last failed session's, else the one the
    run's error names (``file:line:col: ...``)."""
    failed = [s for s in steps if s.status == "failed"]
    if failed and failed[-1].line:
        return failed[-1].line
    match = _LOCATION.match(error or "")
    return int(match.group(1)) if match else None


# ----------------------------------------------------------------------------- summaries
#: A timeline row of more sessions than this is summed up as counts in :data:`BINS` columns.
BARS_PER_ROW = 60
BINS = 80
#: A line's state from its sessions' states, the first present wins.
_LINE_STATE = (("executing", "running"), ("failed", "failed"), ("interrupted", "interrupted"),
               ("cancelled", "cancelled"), ("complete", "done"), ("judged", "done"))
_ITERATION = re.compile(r"\[(\d+)\]")
_STOPPED = ("failed", "cancelled", "interrupted")


def shown_state(status: str) -> str:
    """The state a session is shown in (``executing`` is running, ``complete`` done)."""
    return {"executing": "running", "complete": "done"}.get(status, status)


def summarize(steps: Sequence[Step], source: str, status: str, error: str | None,
              session_lines: list[int] | None, tools: Iterable[JournalEntry], *,
              now: float | None = None) -> dict[str, Any]:
    """A run's steps summed up, as its page shows them whatever page of sessions it is on:
    the sessions' counts by status, each statement line's state and note (its sessions'
    counts, time and extra attempts, its last verdicts), the timeline (a statement's
    sessions as bars, or past :data:`BARS_PER_ROW` as counts in time columns), the failed
    line. The digest carries it, made once as the run ends; a running run's is made on
    each look (``now``: where a session under way reaches to). Plain JSON data."""
    sessions = [s for s in steps if s.kind == "session"]
    failed_line = _failed_line(steps, error)
    count = len(source.rstrip("\n").split("\n"))
    by_line: dict[int, list[Step]] = defaultdict(list)
    for step in steps:
        if 0 < step.line <= count:
            by_line[step.line].append(step)
    marks: dict[int, list[Any]] = {}
    for number, found in by_line.items():
        ran = [s for s in found if s.kind == "session"]
        verdicts = [[s.verdict, s.reason] for s in found if s.kind == "verdict"][-3:]
        states = Counter(s.status for s in ran)
        state = next((name for key, name in _LINE_STATE if states[key]),
                     "done" if verdicts else "")
        times = [s.duration for s in ran if s.duration is not None]
        again = sum(s.attempts - 1 for s in ran if s.attempts > 1)
        marks[number] = [number, state, states.most_common() if len(ran) > 1 else [],
                         sum(times) if times else None, len(times), again, verdicts]
    unreached = "skipped" if status in ("completed", "failed") else "pending"
    for number in (session_lines if session_lines is not None
                   else program_map(source).session_lines):
        if 0 < number <= count and not (number in marks and marks[number][1]):
            marks[number] = marks.get(number) or [number, "", [], None, 0, 0, []]
            marks[number][1] = unreached  # an interrupted run may still get there
    if failed_line and status == "failed" and 0 < failed_line <= count:
        marks[failed_line] = marks.get(failed_line) or [failed_line, "", [], None, 0, 0, []]
        marks[failed_line][1] = "failed"
    starts = [s.started_at for s in steps if s.started_at is not None]
    ends = [s.ended_at for s in steps if s.ended_at is not None]
    return {"sessions": len(sessions), "counts": dict(Counter(s.status for s in sessions)),
            "failed_line": failed_line,
            "first": min(starts) if starts else None, "last": max(ends) if ends else None,
            "host_steps": sum(1 for s in steps if ":" in s.key),
            "refused": sum(1 for e in tools if e.status == "refused"),
            "stopped": any(s.status in _STOPPED for s in steps),
            "marks": [marks[n] for n in sorted(marks)],
            "timeline": _timeline(sessions, now)}


def _timeline(sessions: list[Step], now: float | None) -> dict[str, Any] | None:
    timed = [s for s in sessions if s.started_at is not None]
    if not timed:
        return None
    start = min(s.started_at or 0.0 for s in timed)
    end = max((s.ended_at or s.started_at or 0.0) for s in timed)
    if now is not None:
        end = max(end, now)  # a session under way reaches to now
    span = max(end - start, 1e-3)
    groups: dict[int, list[Step]] = defaultdict(list)
    for step in timed:
        groups[step.line].append(step)
    rows = []
    for number in sorted(groups):
        steps = groups[number]
        rounds = {m.group(1) for s in steps for m in [_ITERATION.search(s.key)] if m}
        row: dict[str, Any] = {"line": number, "key": steps[0].key, "count": len(steps),
                               "rounds": len(rounds)}
        if len(steps) <= BARS_PER_ROW:
            row["bars"] = [[s.key, s.status, s.started_at, s.ended_at]
                           for s in sorted(steps, key=lambda s: s.started_at or 0.0)]
        else:
            bins: list[Counter[str]] = [Counter() for _ in range(BINS)]
            for step in steps:
                at = int(((step.started_at or start) - start) / span * (BINS - 1))
                bins[at][shown_state(step.status)] += 1
            row["bins"] = [[i, dict(counted)] for i, counted in enumerate(bins) if counted]
        rows.append(row)
    return {"start": start, "end": end, "rows": rows}


def run_summary(view: RunView, now: float | None = None) -> dict[str, Any]:
    """The view's steps summed up: the digest's summary, else made from its steps."""
    if view.summary is not None:
        return view.summary
    return summarize(view.steps, view.source, view.status, view.error, view.session_lines,
                     view.tools, now=now)


def sessions_of(view: RunView) -> Sequence[Step]:
    """The view's sessions in the order they started (a digest's: read a slice at a time)."""
    if view.sessions is not None:
        return view.sessions
    return sorted((s for s in view.steps if s.kind == "session"),
                  key=lambda s: (s.started_at or 0.0, s.key))


# ----------------------------------------------------------------------------- digests
#: The digest's layout; a digest of another version is not read (the journal is), but for
#: the older one, one JSON object of every step, binding and tool call, read whole.
DIGEST_VERSION = 2
OLDER_DIGEST = 1
#: The digest indexes its rows in blocks of this many: a page of rows reads a block or two.
BLOCK = 50
#: Bytes read first for a digest's head (more when its head is longer).
_HEAD_READ = 1 << 16
T = TypeVar("T")


def digest(run: Run, status: str, error: str | None) -> str:
    """What a view of the run, once ended as ``status``, reads instead of its journal,
    bindings, frames and grants. Its first line, the head, is all a first look reads: the
    usage (its imports' too), the steps summed up (:func:`summarize`), agents, the frames
    still open, ``run:`` notes and where the rows are. The rows follow, one JSON array a
    line, indexed every :data:`BLOCK` rows: the steps (the sessions first, in the order they
    started, each with its tool calls), the bindings' names and kinds, and tool calls of no
    session. A page of a 20,000-session run reads its head and one block. Written by the
    driver as the run ends, from what it holds in memory; no value is in it."""
    entries = run_journal(run.store, run.id, run.step_entries())
    steps = build_steps(entries, run.program_source, False, enclosing=False)
    steps.sort(key=lambda s: (s.kind != "session", s.started_at or 0.0, s.key))
    tools = run.tool_calls()
    left = _attach_tools(steps, tools)
    usage = usage_of(entries)
    session_lines = program_map(run.program_source).session_lines
    sections = {
        "steps": [[s.key, s.kind, s.line, s.end_line, s.status, s.started_at, s.ended_at,
                   s.attempts, s.binding and [s.binding.name, s.binding.execution_id],
                   s.error, s.usage.input_tokens, s.usage.output_tokens, s.usage.cost_usd,
                   s.verdict, s.reason, [[e.status, e.meta] for e in s.tools]]
                  for s in steps],
        "bindings": [[ref.name, ref.execution_id, kind] for ref, kind in run.binding_index()],
        "tools": [[e.key, e.status, e.meta] for e in left],
    }
    body, index, at = [], {}, 0
    for name, rows in sections.items():
        marks = [at]
        for i, row in enumerate(rows, start=1):
            line = json.dumps(row, separators=(",", ":")) + "\n"  # ASCII: bytes = characters
            body.append(line)
            at += len(line)
            if i % BLOCK == 0 or i == len(rows):
                marks.append(at)
        index[name] = marks
    head = {
        "version": DIGEST_VERSION, "backend": run.store.kind, "status": status, "error": error,
        "usage": [usage.input_tokens, usage.output_tokens, usage.cost_usd, usage.sessions],
        "summary": summarize(steps, run.program_source, status, error, session_lines, tools),
        "agents": [[a.name, a.scope, a.path] for a in run.agents()],
        "frames": [[f.execution_id, f.block, f.depth, f.parent, f.status, f.key]
                   for f in run.frames() if f.status == "executing"],
        "notes": {e.key: [e.kind, e.status, e.meta, e.error] for e in run.journal_entries()
                  if _is_note(e.key)},
        "session_lines": session_lines,
        "rows": {name: len(rows) for name, rows in sections.items()},
        "tool_calls": len(tools),
        "index": index,
    }
    return json.dumps(head, separators=(",", ":")) + "\n" + "".join(body)


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


def _digest_head(store: StateStore, record: Any) -> dict[str, Any] | None:
    """The head of the run's digest if this backend wrote it and it describes the run as its
    record has it now (a resumed run's digest is of an earlier end: not read until the run
    ends again and writes another). Its ``base``: where its rows begin."""
    if record.status not in ENDED:
        return None
    data = store.backend.read_digest(record.id, 0, _HEAD_READ)
    if data is None:
        return None
    if b"\n" not in data and len(data) == _HEAD_READ:  # a longer head, or an older digest
        data += store.backend.read_digest(record.id, _HEAD_READ) or b""
    text = data.split(b"\n", 1)[0]
    try:
        found = json.loads(text)
    except ValueError:
        return None  # damaged: the journal is read instead
    if not isinstance(found, dict) or found.get("version") not in (DIGEST_VERSION,
                                                                   OLDER_DIGEST) or \
            (found.get("backend"), found.get("status"), found.get("error")) != \
            (store.kind, record.status, record.error):
        return None  # another backend's (a run exported shares its directory), or unknown
    found["base"] = len(text) + 1
    return found


def _digest_rows(store: StateStore, run_id: str, found: dict[str, Any], section: str,
                 start: int, stop: int) -> list[list[Any]]:
    """Rows ``start`` to ``stop`` of a digest's ``section``: the blocks holding them only."""
    if start >= stop:
        return []
    marks, base = found["index"][section], found["base"]
    first, last = start // BLOCK, (stop - 1) // BLOCK + 1
    data = store.backend.read_digest(run_id, base + marks[first], base + marks[last])
    try:
        rows = json.loads(b"[" + (data or b"").rstrip(b"\n").replace(b"\n", b",") + b"]")
    except ValueError:
        rows = None
    if not isinstance(rows, list) or len(rows) < stop - first * BLOCK:
        raise DamagedState(f"run {run_id}: its digest's {section} are damaged (rows "
                           f"{start}-{stop}); remove digest.json to read the journal")
    return rows[start - first * BLOCK:stop - first * BLOCK]


class _Rows(Sequence[T]):
    """Rows read when asked for: a slice reads its rows only; iterating reads them all
    (once). A page of 50 of a run's 20,000 sessions costs 50."""

    def __init__(self, length: int, part: Callable[[int, int], list[T]]) -> None:
        self.length, self.part = length, part
        self._all: list[T] | None = None

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self.length)
            if step == 1 and self._all is None:
                return self.part(start, stop)
        return self.whole()[index]

    def __iter__(self) -> Iterator[T]:
        return iter(self.whole())

    def whole(self) -> list[T]:
        if self._all is None:
            self._all = self.part(0, self.length)
        return self._all


def run_usage(store: StateStore, record: Any) -> Usage:
    """A run's usage with its imports', from its digest when it has one: the one count of
    sessions, tokens and cost every command and view shows."""
    found = _digest_head(store, record)
    if found is not None:
        return Usage(*found["usage"])
    return usage_of(run_journal(store, record.id))


def _view_of_digest(store: StateStore, record: Any, found: dict[str, Any], *, whole: bool
                    ) -> RunView:
    run_id = record.id
    older = found["version"] == OLDER_DIGEST  # one object, read whole: its lists as they are
    places: list[ProgramMap] = []  # compiled only to place a stopped step: a first look skips it

    def rows_of(section: str, start: int, stop: int) -> list[list[Any]]:
        if older:
            return found[section][start:stop]
        return _digest_rows(store, run_id, found, section, start, stop)

    def steps_of(start: int, stop: int) -> list[Step]:
        out = []
        for (key, kind, line, end_line, status, started, ended, attempts, binding, error,
             tokens_in, tokens_out, cost, verdict, reason, *tools) in \
                rows_of("steps", start, stop):
            enclosing: tuple[Enclosing, ...] = ()
            if status in _STOPPED:  # what the view shows around
                path = driver_path(key) if ":" in key else key
                if path:
                    if not places:
                        places.append(program_map(record.program_source))
                    enclosing = places[0].place(path).enclosing
            out.append(Step(key, kind, line, end_line, status, enclosing,
                            BindingRef(*binding) if binding else None, error,
                            Usage(tokens_in, tokens_out, cost), started, ended, verdict,
                            reason, attempts, [JournalEntry(key, "tool", status=status,
                                                            meta=meta)
                                               for status, meta in (tools or [[]])[0]]))
        return out

    def bindings_of(start: int, stop: int) -> list[BindingInfo]:
        return [BindingInfo(BindingRef(name, eid), kind,
                            store.backend.binding_location(run_id, BindingRef(name, eid)))
                for name, eid, kind in rows_of("bindings", start, stop)]

    def tools_of(start: int, stop: int) -> list[JournalEntry]:
        calls = [entry for step in steps for entry in step.tools] + [
            JournalEntry(key, "tool", status=status, meta=meta) for key, status, meta in
            rows_of("tools", 0, len(found["tools"]) if older else found["rows"]["tools"])]
        return sorted(calls, key=lambda e: e.meta.get("at") or 0.0)[start:stop]  # recorded order

    steps: Sequence[Step]
    if older:
        steps = steps_of(0, len(found["steps"]))
        tools: Sequence[JournalEntry] = tools_of(0, len(found["tools"]))
        _attach_tools(steps, list(tools))
        bindings = _Rows(len(found["bindings"]), bindings_of)
        summary, sessions = None, None  # made from the steps, as of a running run
    else:
        rows = found["rows"]
        steps = _Rows(rows["steps"], steps_of)
        if whole:
            steps = sorted(steps, key=lambda s: (s.started_at or 0.0, s.key))
        tools, bindings = _Rows(found["tool_calls"], tools_of), _Rows(rows["bindings"],
                                                                      bindings_of)
        summary, sessions = found["summary"], _Rows(found["summary"]["sessions"], steps_of)
    agents = {AgentRef(*agent): None for agent in found["agents"]}
    frames = [Frame(eid, block, depth, parent, status=status, key=key)
              for eid, block, depth, parent, status, key in found["frames"]]
    notes = {key: JournalEntry(key, kind, status=status, error=error, meta=meta)
             for key, (kind, status, meta, error) in found["notes"].items()}
    return RunView(record.id, store.kind, record.program_path, record.program_source,
                   record.status, record.started, record.updated, record.error, steps, frames,
                   bindings, _agent_locations(store, record.id, agents), Usage(*found["usage"]),
                   tools=tools, notes=notes, session_lines=found.get("session_lines"),
                   summary=summary, sessions=sessions)


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


__all__ = ["BARS_PER_ROW", "BINS", "CHECKER_KEY", "BindingInfo", "RunView", "Step", "build_steps",
           "digest", "load_view", "no_collection", "run_journal", "run_summary", "run_usage",
           "sessions_of", "shown_state", "summarize", "usage_of", "view_of_run"]
