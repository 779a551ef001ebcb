"""What the pages show, read through the state API (never written): the runs list and one
run's page. Everything here is plain data; the templates escape it.

Big runs stay cheap: an ended run is read from its digest's head (state.view.digest: usage,
and its steps summed up by the state layer, state.view.summarize), plus the rows of the
sessions and bindings pages shown; the runs list reads usage only for the page shown; the
timeline draws one row per statement with a bounded number of bars (a density strip past
that), never one element per session of a 20,000-session run. This module only lays out
what the state layer summed up.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openprose.cli.common import size_text
from openprose.cli.runs_cmd import duration, human_duration
from openprose.engine.runner import SETTINGS_KEY
from openprose.state import BindingRef, StateError
from openprose.state.models import AgentRef, Usage
from openprose.state.render import active_constructs
from openprose.state.view import (
    BINS,
    CHECKER_KEY,
    ENDED,
    RunView,
    load_view,
    no_collection,
    run_summary,
    run_usage,
    sessions_of,
    shown_state,
)

PAGE = 50  # rows per page: runs, sessions, bindings
PREVIEW = 80  # characters of a binding's preview
MEMORY_SHOWN = 20_000  # characters of an agent's memory shown in the page
LANES = 4  # overlapping sessions of one row drawn in up to this many lanes
WIDTH = 1000  # the timeline's drawing width (SVG units)
LABEL = 300  # of which the row labels take this much
LABEL_CHARS = 40  # characters of a row's label and its count that fit in LABEL
ROW = 22


def page_of(items: Sequence[Any], page: int) -> tuple[list[Any], int, int]:
    """``items`` of page ``page`` (1-based, clamped), that page and the number of pages."""
    pages = max(1, -(-len(items) // PAGE))
    page = min(max(1, page), pages)
    return list(items[(page - 1) * PAGE:page * PAGE]), page, pages


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
    verdicts: list[tuple[Any, str]] = field(default_factory=list)  # (verdict, reason)


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
    """What a run's page shows whatever page of sessions and bindings it is on: of an ended
    run with a digest, read from the digest's head only."""
    view = load_view(store, run_id, values=False, head=True)
    summary = run_summary(view, None if view.finished else time.time())
    failed_line = summary["failed_line"]
    lines = view.source.split("\n")
    checker = checker_failure(view)
    marked = source_lines(view.source, summary)
    if checker is not None and 0 < checker["line"] <= len(marked):
        marked[checker["line"] - 1].state = "failed"
    return {
        "view": view,
        "sessions": sessions_of(view),
        "session_counts": session_counts(view, summary),
        "took": seconds_text(_took(view, summary)),
        "tokens": view.usage.input_tokens + view.usage.output_tokens,
        "source": source_blocks(marked),
        "checker": checker,
        "failed_line": failed_line if view.status == "failed" or view.error else None,
        "failed_text": lines[failed_line - 1].strip()
        if failed_line and failed_line <= len(lines) else "",
        "over_budget": bool(view.error and view.error.startswith("budget reached")),
        "budget": _budget(view),
        "host_steps": summary["host_steps"],
        "timeline": timeline(view.source, summary),
        # the constructs around steps under way or stopped (none: no step is read for them)
        "constructs": [(line.startswith(" "), line.strip().removeprefix("- "))
                       for line in (active_constructs(view) if summary["stopped"]
                                    or not view.finished else [])],  # (nested, text)
        "stack": sorted((f for f in view.frames if f.status == "executing"),
                        key=lambda f: -f.execution_id)[:20],
        "refused": summary["refused"],
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


def session_counts(view: RunView, summary: dict[str, Any]) -> list[tuple[int, str]]:
    """The run's sessions as the header and the table both count them: those completed
    (the count ``prose runs``, ``prose show`` and ``get_run`` give), then each other state."""
    states: Counter[str] = Counter()
    for status, n in summary["counts"].items():
        states[shown_state(status)] += n
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
    bindings, bpage, bpages = page_of(view.bindings, bpage)
    binding_rows = []
    for info in bindings:
        found = store.stored_binding(run_id, info.ref)
        value = found.value if found is not None else ""
        binding_rows.append({"name": info.ref.name, "eid": info.ref.execution_id,
                             "kind": info.kind, "size": size_text(len(value.encode())),
                             "preview": _preview(value)})
    return {**data, "sessions": shown, "spage": spage, "spages": spages,
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


def _took(view: RunView, summary: dict[str, Any]) -> float | None:
    """The run's time: its record's (stamped to the second), or its steps' span if longer."""
    took = duration(view.started, view.updated, not view.finished)
    if summary["first"] is not None and summary["last"] is not None:
        took = max(took or 0.0, summary["last"] - summary["first"])
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


def source_lines(source: str, summary: dict[str, Any]) -> list[Line]:
    """The program's lines, each statement's marked with what its steps did."""
    out = [Line(i, text) for i, text in enumerate(source.rstrip("\n").split("\n"), start=1)]
    for number, state, counts, seconds, timed, again, verdicts in summary["marks"]:
        if not 0 < number <= len(out):
            continue
        line = out[number - 1]
        line.state, line.verdicts = state, [(v, reason) for v, reason in verdicts]
        parts = []
        if counts:
            parts.append(", ".join(f"{n} {status}" for status, n in counts))
        if timed:
            parts.append(seconds_text(seconds) if timed == 1
                         else f"{seconds_text(seconds)} in all")
        if again:  # a retry, or a start again after the run was resumed
            parts.append(f"{again} more attempt{'s' if again > 1 else ''}")
        line.note = " · ".join(parts)
    return out


def timeline(source: str, summary: dict[str, Any]) -> dict[str, Any]:
    """Sessions as bars over time, one row per statement (a loop's rounds in its row, parallel
    branches in rows side by side); a row the state layer summed up as counts in columns is a
    density strip."""
    found = summary["timeline"]
    if not found:
        return {"rows": [], "height": 0, "span": ""}
    start, end = found["start"], found["end"]
    span = max(end - start, 1e-3)
    scale = (WIDTH - LABEL) / span
    lines = source.split("\n")
    rows, y = [], 0.0
    for row in found["rows"]:
        number = row["line"]
        text = lines[number - 1].strip() if 0 < number <= len(lines) else row["key"]
        summary_text = f"×{row['count']}" + (f" in {row['rounds']} rounds"
                                             if row["rounds"] > 1 else "")
        bars: list[Bar] = []
        strips: dict[str, list[str]] = {}  # a density strip: a path a state
        if "bars" in row:
            placed, lane_end = [], [-1.0] * LANES
            for key, status, began, ended in row["bars"]:
                ended = ended or end
                lane = next((i for i, t in enumerate(lane_end) if t <= began), LANES - 1)
                lane_end[lane] = ended
                placed.append((key, status, lane, began, ended))
            height = (ROW - 4) / (1 + max(lane for _, _, lane, _, _ in placed))
            for key, status, lane, began, ended in placed:
                bars.append(Bar(LABEL + (began - start) * scale, y + 2 + lane * height,
                                max(2.0, (ended - began) * scale), max(1.0, height - 1),
                                shown_state(status),
                                f"{key}: {status}, {seconds_text(ended - began)}"))
        else:
            peak = max(sum(counted.values()) for _, counted in row["bins"]) or 1
            width = (WIDTH - LABEL) / BINS
            for i, counted in row["bins"]:
                total = sum(counted.values())
                height = max(2.0, (ROW - 4) * total / peak)
                state = next((s for s in ("failed", "running", "cancelled") if counted.get(s)),
                             "done")
                strips.setdefault(state, []).append(
                    f"M{LABEL + i * width:.1f} {y + ROW - 2 - height:.1f}"
                    f"h{width - 0.5:.1f}v{height:.1f}h-{width - 0.5:.1f}z")
        label = f"{number}: {text}"
        room = min(26, LABEL_CHARS - len(summary_text))  # the label and the count share a line
        label = label if len(label) <= room else label[:room - 1] + "…"
        rows.append(TimelineRow(label, y, summary_text, bars,
                                {state: "".join(parts) for state, parts in strips.items()}))
        y += ROW
    return {"rows": rows, "height": y, "span": seconds_text(span), "label": LABEL,
            "width": WIDTH}


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
