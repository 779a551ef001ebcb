"""Rendering ``state.md``: the program annotated with where execution is and what it made."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from openprose.state.models import StatementStatus, StateSnapshot

if TYPE_CHECKING:
    from openprose.state.store import Run

LOOKAHEAD = 8


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


def render_trace(source: str, statuses: tuple[StatementStatus, ...]) -> str:
    lines = source.rstrip("\n").split("\n")
    notes: dict[int, str] = {}
    last = 0
    for status in statuses:
        if 1 <= status.line <= len(lines):
            notes[status.line] = _annotation(status)
            if status.status in ("executing", "retrying", "complete", "failed"):
                last = max(last, status.end_line)
    shown = lines[:min(len(lines), last + LOOKAHEAD)] if last else lines
    width = min(60, max((len(line) for line in shown), default=0))
    out = []
    for number, line in enumerate(shown, start=1):
        note = notes.get(number)
        out.append(f"{line.ljust(width)}  {note}" if note else line)
    if len(shown) < len(lines):
        out.append(f"# ... {len(lines) - len(shown)} more line(s)")
    return "\n".join(out)


def render_state(run: Run, snapshot: StateSnapshot) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    parts = [
        "# Execution State", "",
        f"run: {run.id}",
        f"program: {run.program_path or '(inline)'}",
        f"started: {run.record.started}",
        f"updated: {now}", "",
        "## Execution Trace", "", "```prose", render_trace(run.program_source, snapshot.statuses),
        "```", "",
    ]
    if snapshot.active:
        parts += ["## Active Constructs", "", *snapshot.active, ""]
    parts += ["## Index", "", "### Bindings", "",
              "| Name | Kind | Path | Execution ID |", "| --- | --- | --- | --- |"]
    for ref, kind in run.binding_index():
        scope = str(ref.execution_id) if ref.execution_id else "(root)"
        parts.append(f"| {ref.name} | {kind} | {run.binding_location(ref)} | {scope} |")
    agents = run.agents()
    if agents:
        parts += ["", "### Agents", "", "| Name | Scope | Path |", "| --- | --- | --- |"]
        for agent in agents:
            where = run.backend.memory_location(run.id, agent)
            if where.endswith("/memory.md"):  # a directory of files: show the directory
                where = where.removesuffix("memory.md")
            parts.append(f"| {agent.name} | {agent.scope} | {where} |")
    stack = [f for f in run.frames() if f.status != "completed"]
    if stack:
        parts += ["", "## Call Stack", "", "| execution_id | block | depth | status |",
                  "| --- | --- | --- | --- |"]
        deepest = max(f.depth for f in stack)
        for frame in sorted(stack, key=lambda f: -f.execution_id):
            status = "executing" if frame.depth == deepest else "waiting"
            parts.append(f"| {frame.execution_id} | {frame.block} | {frame.depth} | {status} |")
    return "\n".join(parts) + "\n"


__all__ = ["StateSnapshot", "render_state", "render_trace"]
