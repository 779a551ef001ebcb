"""Rendering a run as ``state.md``: the program annotated with where execution is and what
it made, the run's status and error, the constructs under way, and an index of bindings,
agents and the call stack. The same text is what ``prose show`` prints and what the MCP
state resource serves, on every backend.

Big runs stay readable: a line run many times gets one annotation with counts, bindings
made in many block executions or by many anonymous sessions are summarized per name, and
the active constructs and call stack are cut to their most relevant entries.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from openprose.language import nodes as n
from openprose.language.analysis import NodeVisitor
from openprose.state.models import StatementStatus, StateSnapshot, utc_now
from openprose.state.program_map import program_map
from openprose.state.view import BindingInfo, RunView, Step, view_of_run

if TYPE_CHECKING:
    from openprose.state.store import Run

LOOKAHEAD = 8
NOTE_WIDTH = 60
MAX_CONSTRUCTS = 12
MAX_FRAMES = 20
GROUP_AT = 4  # bindings of one name in this many executions or more are summarized
ANON = re.compile(r"anon_\d+$")


def _annotation(status: StatementStatus) -> str:
    if status.status == "executing":
        return "# <-- EXECUTING"
    if status.status == "retrying":
        return f"# <-- RETRYING (attempt {status.attempt}/{status.max_attempts})"
    if status.status == "complete":
        return f"# --> bindings/{status.binding} (complete)" if status.binding else "# (complete)"
    if status.status == "not_entered":
        return "# [not yet entered]"
    if status.status == "next":
        return "# [...next...]"
    return f"# ({status.status})"


def _short(text: str, width: int = NOTE_WIDTH) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 1] + "…"


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{count} {status}" for status, count in counter.most_common())


def _step_note(steps: list[Step]) -> str:
    """One annotation for every step recorded at a line."""
    sessions = [s for s in steps if s.kind == "session"]
    verdicts = [s for s in steps if s.kind == "verdict"]
    if not sessions:
        last = verdicts[-1]
        rounds = f" ×{len(verdicts)}" if len(verdicts) > 1 else ""
        return f"# (judged{rounds}: {_short(str(last.verdict).lower(), 12)})"
    states = Counter(s.status for s in sessions)
    if len(sessions) == 1:
        step = sessions[0]
        if step.status == "executing":
            return "# <-- EXECUTING"
        if step.status == "failed":
            return f"# <-- FAILED: {_short(step.error or 'failed')}"
        if step.status == "complete" and step.binding is not None:
            return f"# --> bindings/{step.binding.file_name} (complete)"
        return f"# ({step.status})"
    if states["executing"]:
        return f"# <-- EXECUTING ×{states['executing']} ({_counts(states)})"
    if states["failed"]:
        return f"# <-- FAILED ({_counts(states)})"
    return f"# ({_counts(states)})"


def _line_notes(view: RunView) -> dict[int, str]:
    by_line: dict[int, list[Step]] = defaultdict(list)
    for step in view.steps:
        if step.line:
            by_line[step.line].append(step)
    notes = {line: _step_note(steps) for line, steps in by_line.items()}
    for line, status in view.live.items():
        if status.status == "retrying" or line not in notes:
            notes[line] = _annotation(status)
    error_line = view.error_line
    if error_line and view.status == "failed" and not notes.get(error_line, "").startswith(
            "# <-- FAILED"):
        message = (view.error or "").split(": ", 1)[-1]
        notes[error_line] = f"# <-- FAILED: {_short(message)}"
    return notes


def _next_line(view: RunView, last: int) -> int | None:
    analysis = program_map(view.source).analysis
    if analysis is None or view.finished:
        return None
    return next((s.line for s in analysis.statements.values()
                 if s.parent is None and s.block is None and s.line > last
                 and s.kind not in ("block", "agent")), None)


def render_trace(view: RunView) -> str:
    lines = view.source.rstrip("\n").split("\n")
    notes = _line_notes(view)
    reached = [s.end_line or s.line for s in view.steps if s.line]
    reached += [s.end_line for s in view.live.values()
                if s.status in ("executing", "retrying", "complete", "failed", "cancelled")]
    last = min(max([*reached, view.error_line or 0], default=0), len(lines))
    upcoming = _next_line(view, last) if last else None
    if upcoming and upcoming not in notes:
        notes[upcoming] = "# [...next...]"
    shown = lines if view.finished or not last else lines[:min(len(lines), last + LOOKAHEAD)]
    width = min(60, max((len(line) for line in shown), default=0))
    out = []
    for number, line in enumerate(shown, start=1):
        note = notes.get(number)
        out.append(f"{line.ljust(width)}  {note}" if note else line)
    if len(shown) < len(lines):
        out.append(f"# ... {len(lines) - len(shown)} more line(s)")
    return "\n".join(out)


def _lines_of(node: n.Node) -> str:
    span = node.span
    return f"line {span.line}" if span.end_line <= span.line else \
        f"lines {span.line}-{span.end_line}"


def active_constructs(view: RunView) -> list[str]:
    """The loops and parallel blocks of in-flight steps (or, once the run stopped, of the
    steps it stopped at): loop iteration n of max, each parallel branch's state."""
    focus = ("executing",) if not view.finished else ("failed", "cancelled", "interrupted")
    constructs: dict[str, tuple[str, n.Node | None]] = {}
    for step in view.steps:
        if step.status in focus:
            for enclosing in step.enclosing:
                if enclosing.kind in ("iteration", "branch"):
                    constructs.setdefault(enclosing.key, (enclosing.kind, enclosing.node))
    out: list[str] = []
    for key, (kind, node) in list(constructs.items())[:MAX_CONSTRUCTS]:
        if node is None:
            continue
        if kind == "branch":
            out += _parallel(view, key, node)
        else:
            out += _loop(view, key, node)
    if len(constructs) > MAX_CONSTRUCTS:
        out.append(f"- ... {len(constructs) - MAX_CONSTRUCTS} more construct(s) under way")
    return out


def _under(view: RunView, prefix: str) -> list[Step]:
    return [s for s in view.steps if s.key.startswith(prefix)]


def _parallel(view: RunView, key: str, node: n.Node) -> list[str]:
    out = [f"- Parallel ({_lines_of(node)}):"]
    branches = getattr(node, "branches", ())
    for i, branch in enumerate(branches):
        states = {s.status for s in _under(view, f"{key}|{i}") if s.kind == "session"}
        status = next((s for s in ("executing", "failed", "cancelled", "interrupted")
                       if s in states), "complete" if states else "not started")
        label = branch.name or f"branch {i + 1}"
        out.append(f"  - {label}: {status}")
    return out


def _loop(view: RunView, key: str, node: n.Node) -> list[str]:
    pattern = re.compile(re.escape(key) + r"\[(\d+)\]")
    started: set[int] = set()
    running: set[int] = set()
    for step in _under(view, key + "["):
        match = pattern.match(step.key)
        if match:
            started.add(int(match.group(1)))
            if step.status == "executing":
                running.add(int(match.group(1)))
    label, limit = _Iterated().visit(node)
    of = f" of {limit}" if limit is not None else ""
    current = max(started, default=0) + 1
    if len(running) > 1:
        where = f"{len(running)} iterations in flight, {len(started)}{of} started"
    else:
        where = f"iteration {current}{of}"
    return [f"- {label} ({_lines_of(node)}): {where}"]


class _Iterated(NodeVisitor):
    """How ``state.md`` names a construct a run iterates, and its iteration count when the
    program text gives it (None otherwise)."""

    def visit_Loop(self, node: n.Loop) -> tuple[str, int | None]:
        label = "Loop"
        if node.mode and node.condition is not None:
            text = getattr(node.condition, "text", "")
            label = f"Loop {node.mode} **{_short(text, 40)}**" if text else f"Loop {node.mode}"
        return label, node.max

    def visit_Repeat(self, node: n.Repeat) -> tuple[str, int | None]:
        count = node.count
        return "Repeat", int(count.value) if isinstance(count, n.Number) else None

    def visit_For(self, node: n.For) -> tuple[str, int | None]:
        items = node.collection
        return ("Parallel for" if node.parallel else "For",
                len(items.items) if isinstance(items, n.Array) else None)

    def generic_visit(self, node: n.Node, *args: Any, **kwargs: Any) -> tuple[str, int | None]:
        return type(node).__name__, None


def _binding_rows(bindings: list[BindingInfo]) -> list[str]:
    """One row per binding; a name made in many executions, or the anonymous sessions'
    outputs when there are many, as one summary row."""
    groups: dict[tuple[str, str], list[BindingInfo]] = defaultdict(list)
    for info in bindings:
        name = "anon_*" if ANON.match(info.ref.name) else info.ref.name
        scoped = info.ref.execution_id is not None
        groups[(name, "scoped" if scoped else "root")].append(info)
    rows = []
    for (name, where), members in sorted(groups.items()):
        if len(members) < GROUP_AT:
            for info in members:
                scope = str(info.ref.execution_id) if info.ref.execution_id else "(root)"
                rows.append(f"| {info.ref.name} | {info.kind} | {info.location} | {scope} |")
            continue
        kinds = "/".join(sorted({m.kind for m in members}))
        first, last = members[0], members[-1]
        if where == "scoped":
            ids = sorted(m.ref.eid for m in members)
            scope = f"{len(members)} executions ({ids[0]}-{ids[-1]})"
        else:
            scope = "(root)"
        rows.append(f"| {name} ({len(members)} bindings) | {kinds} | {first.location} … "
                    f"{last.location} | {scope} |")
    return rows


def render_view(view: RunView, active: tuple[str, ...] = ()) -> str:
    now = utc_now()
    parts = [
        "# Execution State", "",
        f"run: {view.id}",
        f"program: {view.program_path or '(inline)'}",
        f"status: {view.status}",
        f"started: {view.started}",
        f"updated: {now}",
    ]
    if view.finished:
        parts.append(f"finished: {view.updated}")
    if view.error:
        parts.append(f"error: {view.error}")
    where = view.failed_line
    if view.status == "failed" and where:
        source = view.source.split("\n")
        text = source[where - 1].strip() if where <= len(source) else ""
        parts.append(f"failed at: line {where}: {_short(text)}")
    parts += ["", "## Execution Trace", "", "```prose", render_trace(view), "```", ""]
    constructs = [*active, *active_constructs(view)]
    if constructs:
        title = "## Active Constructs" if not view.finished else \
            "## Active Constructs (when the run stopped)"
        parts += [title, "", *constructs, ""]
    parts += ["## Index", "", "### Bindings", "",
              "| Name | Kind | Path | Execution ID |", "| --- | --- | --- | --- |"]
    parts += _binding_rows(view.bindings)
    if view.agents:
        parts += ["", "### Agents", "", "| Name | Scope | Path |", "| --- | --- | --- |"]
        parts += [f"| {agent.name} | {agent.scope} | {where} |" for agent, where in view.agents]
    stack = [f for f in view.frames if f.status != "completed"]
    if stack:
        parts += ["", "## Call Stack", "", "| execution_id | block | depth | status |",
                  "| --- | --- | --- | --- |"]
        deepest = max(f.depth for f in stack)
        ordered = sorted(stack, key=lambda f: -f.execution_id)
        for frame in ordered[:MAX_FRAMES]:
            status = ("executing" if frame.depth == deepest else "waiting") \
                if not view.finished else view.status
            parts.append(f"| {frame.execution_id} | {frame.block} | {frame.depth} | {status} |")
        if len(ordered) > MAX_FRAMES:
            parts.append(f"| ... | {len(ordered) - MAX_FRAMES} more frame(s) | | |")
    return "\n".join(parts) + "\n"


def render_state(run: Run, snapshot: StateSnapshot) -> str:
    """state.md of a run this process drives (``snapshot``: the engine's live statuses). Its
    status is the one the run holds: only its driver changes it, so nothing is read back."""
    return render_view(view_of_run(run, snapshot.statuses, status=run.record.status,
                                   error=run.record.error), snapshot.active)


__all__ = ["StateSnapshot", "active_constructs", "render_state", "render_trace",
           "render_view"]
