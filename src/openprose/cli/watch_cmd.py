"""``prose watch RUN``: follow a run live, whoever drives it (``prose run`` or a host through
the MCP server), until it ends.

On the filesystem backend a watchdog observer wakes the view when the run's files change;
databases are polled. Each wake re-reads the run read-only. On a terminal the view redraws
in place; otherwise (and with ``--json``) every change is printed as a line.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from openprose.cli.common import (
    console,
    fail,
    find_run,
    json_option,
    plain,
    project_option,
    state_option,
    stores,
    styled,
)
from openprose.terminal import printable

POLL = 0.25  # seconds between looks at a database-backed run
FALLBACK = 2.0  # the filesystem watcher also looks this often, in case an event was missed
MAX_LINES = 20  # more changes than this in one look are summarized per statement


class Wakeup(AbstractContextManager["Wakeup"]):
    """Something to wait on until the run may have changed."""

    def __init__(self, directory: Path | None) -> None:
        self.event = threading.Event()
        self.observer: Any = None
        if directory is not None and directory.is_dir():
            from watchdog.events import (
                FileClosedEvent,
                FileCreatedEvent,
                FileDeletedEvent,
                FileModifiedEvent,
                FileMovedEvent,
                FileSystemEventHandler,
            )
            from watchdog.observers import Observer

            wake = self.event

            class Handler(FileSystemEventHandler):
                def on_any_event(self, event: Any) -> None:
                    wake.set()

            self.observer = Observer()
            # writes only: the reader's own opens and reads would wake it again and again
            self.observer.schedule(Handler(), str(directory), recursive=True,
                                   event_filter=[FileModifiedEvent, FileCreatedEvent,
                                                 FileMovedEvent, FileClosedEvent,
                                                 FileDeletedEvent])
            self.observer.start()

    def wait(self) -> None:
        self.event.wait(FALLBACK if self.observer is not None else POLL)
        self.event.clear()

    def __exit__(self, *exc: object) -> None:
        if self.observer is not None:
            self.observer.stop()
            self.observer.join(timeout=5)


def run_dir(store: Any, run_id: str) -> Path | None:
    """The directory to watch for a filesystem run (None: the backend is polled)."""
    if store.kind != "filesystem":
        return None
    return Path(store.run_location(run_id))


def _changes(before: dict[str, str], steps: list[Any]) -> list[Any]:
    return [s for s in steps if before.get(f"{s.kind}:{s.key}") != s.status]


@click.command("watch")
@click.argument("run_id", metavar="RUN")
@state_option
@json_option
@project_option
def watch_command(run_id: str, backend: str | None, as_json: bool, project: Path) -> None:
    """Follow run RUN (an id, a unique prefix, or `latest`) live until it ends. Exit status:
    0 completed, 1 failed, 130 interrupted (or stopped with Ctrl-C)."""
    from openprose.state import StateError
    from openprose.state.view import load_view

    with stores(project, backend, "watch") as opened:
        store, found = find_run(opened, run_id, "watch")
        live = not as_json and sys.stdout.isatty()
        seen: dict[str, str] = {}
        report = _live_report() if live else _json_report if as_json else _line_report
        try:
            with Wakeup(run_dir(store, found)) as wakeup, _display(report):
                pause = 0.0
                while True:
                    started = time.monotonic()
                    try:
                        view = load_view(store, found, values=False)
                    except StateError as err:
                        fail("watch", str(err))
                    changed = _changes(seen, view.steps)
                    seen.update({f"{s.kind}:{s.key}": s.status for s in view.steps})
                    report(view, changed)
                    if view.finished:
                        break
                    # Reading a big run costs time: look no more than a fifth of the time.
                    pause = max(0.0, 4 * (time.monotonic() - started))
                    wakeup.wait()
                    if pause:
                        time.sleep(min(pause, 2.0))
        except KeyboardInterrupt:
            sys.exit(130)
    sys.exit({"completed": 0, "interrupted": 130}.get(view.status, 1))


def _display(report: Any) -> AbstractContextManager[Any]:
    return report.live if hasattr(report, "live") else nullcontext()


def _stamp(at: float | None = None) -> str:
    return datetime.fromtimestamp(at if at is not None else time.time()).strftime("%H:%M:%S")


def _statement(view: Any, line: int) -> str:
    lines = view.source.split("\n")
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def _line_report(view: Any, changed: list[Any]) -> None:
    out = console()

    if len(changed) > MAX_LINES:
        per_line: dict[tuple[int, str], int] = {}
        for step in changed:
            per_line[(step.line, step.status)] = per_line.get((step.line, step.status), 0) + 1
        for (line, status), count in sorted(per_line.items()):
            out.print(f"{_stamp()}  line {line:>4}  {count} {status}  "
                      f"{plain(_statement(view, line))}", overflow="ellipsis", no_wrap=True)
    else:
        for step in changed:
            what = _statement(view, step.line) or step.key
            if step.kind == "verdict":
                what = f"? {what} → {str(step.verdict).lower()}"
            pad = " " * max(0, 10 - len(step.status))
            out.print(f"{_stamp()}  line {step.line:>4}  {styled(step.status)}{pad}  "
                      f"{plain(what)}", overflow="ellipsis", no_wrap=True)
    if view.finished:
        tail = f": {view.error}" if view.error else ""
        out.print(f"{_stamp()}  run {view.id} {styled(view.status)}{plain(tail)}",
                  overflow="fold")
    sys.stdout.flush()


def _json_report(view: Any, changed: list[Any]) -> None:
    import json

    data = {"at": round(time.time(), 3), "run_id": view.id, "status": view.status,
            "changed": [step.to_dict() for step in changed]}
    if view.finished:
        data["error"] = view.error
    click.echo(json.dumps(data, ensure_ascii=False, default=str))
    sys.stdout.flush()


def _live_report() -> Callable[[Any, list[Any]], None]:
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    from openprose.state.render import active_constructs, render_trace

    out = console()
    live = Live(Text(""), console=out, auto_refresh=False, transient=False)

    def report(view: Any, changed: list[Any]) -> None:
        height = max(10, out.size.height - 4)
        trace = render_trace(view).split("\n")
        constructs = active_constructs(view)
        room = max(3, height - 4 - len(constructs))
        if len(trace) > room:  # keep the part where execution is
            marked = [i for i, line in enumerate(trace) if "<--" in line] or [len(trace) - 1]
            start = max(0, min(marked[0] - room // 3, len(trace) - room))
            trace = trace[start:start + room]
        header = (f"[bold]run {view.id}[/]  {styled(view.status)}  ·  "
                  f"{view.usage.sessions} sessions  ·  "
                  f"{view.usage.input_tokens + view.usage.output_tokens:,} tokens")
        parts: list[Any] = [Text.from_markup(header)]
        if view.error:
            parts.append(Text.from_markup(f"[red]error[/] {plain(view.error)}"))
        parts.append(Text("\n".join(printable(line)[:out.width] for line in trace)))
        parts += [Text(printable(line)[:out.width]) for line in constructs]
        live.update(Group(*parts), refresh=True)

    report.live = live  # type: ignore[attr-defined]
    return report
