"""What the pages show, read through the state API (never written): the runs list and one
run's page. Everything here is plain data; the templates escape it.

Big runs stay cheap: an ended run is read from its digest (state.view.digest), not its
journal; the runs list reads usage only for the page shown, a run's page reads binding values
only for the bindings page shown, and the timeline draws one row per statement with a bounded
number of bars (a density strip past that), never one element per session of a
20,000-session run.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openprose.cli.common import size_text
from openprose.cli.runs_cmd import duration, human_duration
from openprose.engine.runner import SETTINGS_KEY
from openprose.state import BindingRef, StateError
from openprose.state.models import AgentRef, Usage
from openprose.state.program_map import program_map
from openprose.state.render import active_constructs
from openprose.state.view import (
    CHECKER_KEY,
    ENDED,
    RunView,
    Step,
    load_view,
    no_collection,
    run_usage,
)

PAGE = 50  # rows per page: runs, sessions, bindings
PREVIEW = 80  # characters of a binding's preview
MEMORY_SHOWN = 20_000  # characters of an agent's memory shown in the page
BARS_PER_ROW = 60  # a timeline row with more sessions is drawn as a density strip
BINS = 80  # columns of a density strip
LANES = 4  # overlapping sessions of one row drawn in up to this many lanes
WIDTH = 1000  # the timeline's drawing width (SVG units)
LABEL = 300  # of which the row labels take this much
LABEL_CHARS = 40  # characters of a row's label and its count that fit in LABEL
ROW = 22
_ITERATION = re.compile(r"\[(\d+)\]")
#: A line's state from its sessions' states, the first present wins.
_LINE_STATE = (("executing", "running"), ("failed", "failed"), ("interrupted", "interrupted"),
               ("cancelled", "cancelled"), ("complete", "done"), ("judged", "done"))


def page_of(items: list[Any], page: int) -> tuple[list[Any], int, int]:
    """``items`` of page ``page`` (1-based, clamped), that page and the number of pages."""
    pages = max(1, -(-len(items) // PAGE))
    page = min(max(1, page), pages)
    return items[(page - 1) * PAGE:page * PAGE], page, pages


def seconds_text(seconds: float | None) -> str:
    if seconds is not None and seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return human_duration(seconds)


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW else flat[:PREVIEW - 1] + "…"


# ----------------------------------------------------------------------------- runs list

@dataclass
class RunRow:
    id: str
    backend: str
    program: str
    status: str
    started: str
    took: str
    sessions: int | None = None
    tokens: int | None = None
    cost: float | None = None


def run_list(stores: list[Any], status: str, program: str, page: int, cache: Cache
             ) -> dict[str, Any]:
    """The runs of every store, newest first, filtered; usage read for the page shown only."""
    found: list[tuple[Any, Any]] = []
    problems = []
    for store in stores:
        try:
            found += [(store, record) for record in store.run_records()]
        except StateError as err:
            problems.append(f"{store.kind}: {err}")
    programs = sorted({_program(record) for _, record in found})
    statuses = sorted({record.status for _, record in found})
    chosen = [(s, r) for s, r in found if (not status or r.status == status)
              and (not program or _program(r) == program)]
    chosen.sort(key=lambda pair: (pair[1].started, pair[1].id), reverse=True)
    shown, page, pages = page_of(chosen, page)
    rows = []
    for store, record in shown:
        took = duration(record.started, record.updated, record.status not in ENDED)
        row = RunRow(record.id, store.kind, _program(record), record.status, record.started,
                     "< 1s" if took == 0 else seconds_text(took))  # stamps to the second
        try:
            usage = cache.usage(store, record)
            row.sessions, row.cost = usage.sessions, usage.cost_usd
            row.tokens = usage.input_tokens + usage.output_tokens
        except StateError:
            pass  # shown as "?"
        rows.append(row)
    return {"rows": rows, "page": page, "pages": pages, "total": len(chosen),
            "programs": programs, "statuses": statuses, "status": status, "program": program,
            "problems": problems}


def _program(record: Any) -> str:
    return Path(record.program_path).name if record.program_path else "(inline)"


# ----------------------------------------------------------------------------- one run

@dataclass
class Line:
    number: int
    text: str
    state: str = ""  # running | failed | done | skipped | cancelled | interrupted | pending
    note: str = ""
    verdicts: list[Step] = field(default_factory=list)


@dataclass
class Plain:
    """Consecutive lines with nothing to mark, drawn as one block (a 1,500-line program
    whose statements are a tenth of it stays a few hundred elements)."""

    first: int
    texts: list[str]

    @property
    def numbers(self) -> str:
        return "\n".join(str(n) for n in range(self.first, self.first + len(self.texts)))


def source_blocks(lines: list[Line]) -> list[Line | Plain]:
    """``lines`` with each run of unmarked lines made one :class:`Plain` block."""
    out: list[Line | Plain] = []
    for line in lines:
        if line.state or line.note or line.verdicts:
            out.append(line)
        elif out and isinstance(out[-1], Plain):
            out[-1].texts.append(line.text)
        else:
            out.append(Plain(line.number, [line.text]))
    return out


@dataclass
class Bar:
    x: float
    y: float
    w: float
    h: float
    state: str
    title: str


@dataclass
class TimelineRow:
    label: str
    y: float
    summary: str
    bars: list[Bar]
    #: a density strip's columns (each the sessions started then), one path per state
    strips: dict[str, str] = field(default_factory=dict)


def find_store(stores: list[Any], run_id: str) -> Any | None:
    """The store holding ``run_id`` (an exact id)."""
    for store in stores:
        try:
            if any(info.id == run_id for info in store.list_runs()):
                return store
        except StateError:
            continue
    return None


class Cache:
    """Views of ended runs, kept while their record (status, update time, error) stays the
    same: an ended run changes only when it is resumed, which changes its record. A big run's
    journal is read once, not on every page. Running runs are read afresh each time."""

    KEEP = 8  # views kept (the least recently used goes first)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._views: OrderedDict[tuple[str, str], tuple[tuple[Any, ...], dict[str, Any]]] = \
            OrderedDict()
        self._usage: dict[tuple[str, str], tuple[tuple[Any, ...], Usage]] = {}

    def summary(self, store: Any, run_id: str) -> dict[str, Any]:
        key = (store.kind, run_id)
        mark = _record_mark(store.backend.load_run(run_id))
        with self._lock:
            kept = self._views.get(key)
            if kept is not None and kept[0] == mark:
                self._views.move_to_end(key)
                return kept[1]
        with no_collection():  # a big run's view: a few hundred thousand objects kept
            data = summarize(store, run_id)
        if data["view"].finished and _record_mark(store.backend.load_run(run_id)) == mark:
            with self._lock:
                self._views[key] = (mark, data)
                self._usage[key] = (mark, data["view"].usage)
                while len(self._views) > self.KEEP:
                    self._views.popitem(last=False)
        return data

    def usage(self, store: Any, record: Any) -> Usage:
        key, mark = (store.kind, record.id), _record_mark(record)
        with self._lock:
            kept = self._usage.get(key)
        if kept is not None and kept[0] == mark:
            return kept[1]
        usage = run_usage(store, record)  # the imported programs' sessions too
        if record.status in ENDED:
            with self._lock:
                self._usage[key] = (mark, usage)
        return usage


def _record_mark(record: Any) -> tuple[Any, ...]:
    return (record.status, record.updated, record.error)


def summarize(store: Any, run_id: str) -> dict[str, Any]:
    """What a run's page shows whatever page of sessions and bindings it is on."""
    view = load_view(store, run_id, values=False)
    failed_line = view.failed_line
    lines = view.source.split("\n")
    sessions = sorted((s for s in view.steps if s.kind == "session"),
                      key=lambda s: (s.started_at or 0.0, s.key))
    checker = checker_failure(view)
    marked = source_lines(view)
    if checker is not None and 0 < checker["line"] <= len(marked):
        marked[checker["line"] - 1].state = "failed"
    return {
        "view": view,
        "sessions": sessions,
        "session_counts": session_counts(view, sessions),
        "took": seconds_text(_took(view)),
        "tokens": view.usage.input_tokens + view.usage.output_tokens,
        "source": source_blocks(marked),
        "checker": checker,
        "failed_line": failed_line if view.status == "failed" or view.error else None,
        "failed_text": lines[failed_line - 1].strip()
        if failed_line and failed_line <= len(lines) else "",
        "over_budget": bool(view.error and view.error.startswith("budget reached")),
        "budget": _budget(view),
        "host_steps": sum(1 for s in view.steps if ":" in s.key),
        "timeline": timeline(view),
        "constructs": [(line.startswith(" "), line.strip().removeprefix("- "))
                       for line in active_constructs(view)],  # (nested, text)
        "stack": sorted((f for f in view.frames if f.status == "executing"),
                        key=lambda f: -f.execution_id)[:20],
        "refused": sum(1 for e in view.tools if e.status == "refused"),
        "statement": lambda line: lines[line - 1].strip() if 0 < line <= len(lines) else "",
        "binding_count": len(view.bindings),
        "agents": [_agent(store, run_id, agent, where) for agent, where in view.agents],
        "seconds": seconds_text,
    }


def checker_failure(view: RunView) -> dict[str, Any] | None:
    """The failure of an embodied run's check of its program (the statement the program
    failed at, its line and the error), unless a later check cleared it."""
    entry = view.notes.get(CHECKER_KEY)
    if entry is None or entry.status != "failed":
        return None
    line = entry.meta.get("line")
    return {"statement": entry.meta.get("statement"), "error": entry.error or "",
            "line": line if isinstance(line, int) else 0}


def session_counts(view: RunView, sessions: list[Step]) -> list[tuple[int, str]]:
    """The run's sessions as the header and the table both count them: those completed
    (the count ``prose runs``, ``prose show`` and ``get_run`` give), then each other state."""
    states = Counter(_bar_state(s.status) for s in sessions)
    states.pop("done", None)
    return [(view.usage.sessions, "completed"),
            *((n, state) for state, n in sorted(states.items()))]


def run_page(cache: Cache, store: Any, run_id: str, spage: int, bpage: int
             ) -> dict[str, Any]:
    """Everything the run page shows (``spage``/``bpage``: the sessions and bindings pages);
    binding values and tool calls are read for the page shown only."""
    data = cache.summary(store, run_id)
    view = data["view"]
    shown, spage, spages = page_of(data["sessions"], spage)
    tools: dict[str, list[Any]] = defaultdict(list)
    keys = {step.key for step in shown}
    for entry in view.tools:
        if entry.key in keys:
            tools[entry.key].append(entry)
    bindings, bpage, bpages = page_of(view.bindings, bpage)
    binding_rows = []
    for info in bindings:
        found = store.stored_binding(run_id, info.ref)
        value = found.value if found is not None else ""
        binding_rows.append({"name": info.ref.name, "eid": info.ref.execution_id,
                             "kind": info.kind, "size": size_text(len(value.encode())),
                             "preview": _preview(value)})
    return {**data, "sessions": shown, "spage": spage, "spages": spages,
            "tools": tools,
            "bindings": binding_rows, "bpage": bpage, "bpages": bpages}


def _budget(view: RunView) -> list[str]:
    """The run's budget and how much of it is used, as the run recorded it."""
    settings = view.notes.get(SETTINGS_KEY)
    meta = settings.meta if settings is not None else {}
    used = []
    if meta.get("max_tokens"):
        tokens = view.usage.input_tokens + view.usage.output_tokens
        used.append(f"{tokens:,} of {int(meta['max_tokens']):,} tokens "
                    f"({100 * tokens / int(meta['max_tokens']):.0f}%)")
    if meta.get("max_cost"):
        cost = view.usage.cost_usd
        used.append(f"${cost:.4f} of ${float(meta['max_cost']):.2f} "
                    f"({100 * cost / float(meta['max_cost']):.0f}%)")
    return used


def _took(view: RunView) -> float | None:
    """The run's time: its record's (stamped to the second), or its steps' span if longer."""
    took = duration(view.started, view.updated, not view.finished)
    starts = [s.started_at for s in view.steps if s.started_at is not None]
    ends = [s.ended_at for s in view.steps if s.ended_at is not None]
    if starts and ends:
        took = max(took or 0.0, max(ends) - min(starts))
    return took


def _agent(store: Any, run_id: str, agent: AgentRef, where: str) -> dict[str, Any]:
    try:
        memory = store.backend.read_memory(run_id, agent) or ""
        segments = store.segment_count(run_id, agent)
    except StateError as err:
        memory, segments = f"(cannot read: {err})", 0
    cut = len(memory) > MEMORY_SHOWN
    return {"name": agent.name, "scope": agent.scope, "where": where, "segments": segments,
            "memory": memory[:MEMORY_SHOWN], "cut": cut}


def source_lines(view: RunView) -> list[Line]:
    """The program's lines, each statement's marked with what its steps did."""
    out = [Line(i, text) for i, text in enumerate(view.source.rstrip("\n").split("\n"),
                                                  start=1)]
    by_line: dict[int, list[Step]] = defaultdict(list)
    for step in view.steps:
        if 0 < step.line <= len(out):
            by_line[step.line].append(step)
    for number, steps in by_line.items():
        line = out[number - 1]
        sessions = [s for s in steps if s.kind == "session"]
        line.verdicts = [s for s in steps if s.kind == "verdict"][-3:]
        states = Counter(s.status for s in sessions)
        line.state = next((name for status, name in _LINE_STATE if states[status]),
                          "done" if line.verdicts else "")
        parts = []
        if len(sessions) > 1:
            parts.append(", ".join(f"{n} {s}" for s, n in states.most_common()))
        times = [s.duration for s in sessions if s.duration is not None]
        if times:
            parts.append(seconds_text(sum(times)) if len(times) == 1
                         else f"{seconds_text(sum(times))} in all")
        again = sum(s.attempts - 1 for s in sessions if s.attempts > 1)
        if again:  # a retry, or a start again after the run was resumed
            parts.append(f"{again} more attempt{'s' if again > 1 else ''}")
        line.note = " · ".join(parts)
    unreached = "skipped" if view.status in ("completed", "failed") else "pending"
    for number in (view.session_lines if view.session_lines is not None
                   else program_map(view.source).session_lines):
        if 0 < number <= len(out) and not out[number - 1].state:
            out[number - 1].state = unreached  # an interrupted run may still get there
    error_line = view.failed_line
    if error_line and view.status == "failed" and 0 < error_line <= len(out):
        out[error_line - 1].state = "failed"
    return out


def timeline(view: RunView) -> dict[str, Any]:
    """Sessions as bars over time, one row per statement (a loop's rounds in its row, parallel
    branches in rows side by side); rows past :data:`BARS_PER_ROW` sessions as density."""
    timed = [s for s in view.steps if s.kind == "session" and s.started_at is not None]
    if not timed:
        return {"rows": [], "height": 0, "span": ""}
    start = min(s.started_at or 0.0 for s in timed)
    end = max((s.ended_at or s.started_at or 0.0) for s in timed)
    if not view.finished:
        end = max(end, time.time())  # a session under way reaches to now
    span = max(end - start, 1e-3)
    scale = (WIDTH - LABEL) / span
    lines = view.source.split("\n")
    groups: dict[int, list[Step]] = defaultdict(list)
    for step in timed:
        groups[step.line].append(step)
    rows, y = [], 0.0
    for number in sorted(groups):
        steps = groups[number]
        text = lines[number - 1].strip() if 0 < number <= len(lines) else steps[0].key
        rounds = {m.group(1) for s in steps for m in [_ITERATION.search(s.key)] if m}
        summary = f"×{len(steps)}" + (f" in {len(rounds)} rounds" if len(rounds) > 1 else "")
        bars: list[Bar] = []
        strips: dict[str, list[str]] = defaultdict(list)  # a density strip: a path a state
        if len(steps) <= BARS_PER_ROW:
            placed, lane_end = [], [-1.0] * LANES
            for step in sorted(steps, key=lambda s: s.started_at or 0.0):
                began = step.started_at or start
                ended = step.ended_at or end
                lane = next((i for i, t in enumerate(lane_end) if t <= began), LANES - 1)
                lane_end[lane] = ended
                placed.append((step, lane, began, ended))
            height = (ROW - 4) / (1 + max(lane for _, lane, _, _ in placed))
            for step, lane, began, ended in placed:
                bars.append(Bar(LABEL + (began - start) * scale, y + 2 + lane * height,
                                max(2.0, (ended - began) * scale), max(1.0, height - 1),
                                _bar_state(step.status),
                                f"{step.key}: {step.status}, {seconds_text(ended - began)}"))
        else:
            bins: list[Counter[str]] = [Counter() for _ in range(BINS)]
            for step in steps:
                at = int(((step.started_at or start) - start) / span * (BINS - 1))
                bins[at][_bar_state(step.status)] += 1
            peak = max(sum(b.values()) for b in bins) or 1
            width = (WIDTH - LABEL) / BINS
            for i, counted in enumerate(bins):
                if not counted:
                    continue
                total = sum(counted.values())
                height = max(2.0, (ROW - 4) * total / peak)
                state = next((s for s in ("failed", "running", "cancelled") if counted[s]),
                             "done")
                strips[state].append(f"M{LABEL + i * width:.1f} {y + ROW - 2 - height:.1f}"
                                     f"h{width - 0.5:.1f}v{height:.1f}h-{width - 0.5:.1f}z")
        label = f"{number}: {text}"
        room = min(26, LABEL_CHARS - len(summary))  # the label and the count share a line
        label = label if len(label) <= room else label[:room - 1] + "…"
        rows.append(TimelineRow(label, y, summary, bars,
                                {state: "".join(parts) for state, parts in strips.items()}))
        y += ROW
    return {"rows": rows, "height": y, "span": seconds_text(span), "label": LABEL,
            "width": WIDTH}


def _bar_state(status: str) -> str:
    return {"executing": "running", "complete": "done"}.get(status, status)


def binding_value(store: Any, run_id: str, name: str, eid: int | None) -> Any | None:
    """One binding's whole record (None: no such binding)."""
    from openprose.state.names import check_name, check_run_id

    check_run_id(run_id)
    check_name(name, "binding name")
    return store.stored_binding(run_id, BindingRef(name, eid))


def change_mark(store: Any, run_id: str) -> tuple[Any, ...]:
    """Something that changes whenever the run records anything: its status and update
    time, the length of its journal and its frames."""
    record = store.backend.load_run(run_id)
    if record.status in ENDED:  # nothing more to count: it changes by being resumed
        return _record_mark(record)
    return (*_record_mark(record), len(store.read_journal(run_id)),
            len(store.backend.list_frames(run_id)))
