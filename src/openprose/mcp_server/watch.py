"""Noticing writes to filesystem runs that do not come from the state API.

A watchdog observer watches ``.prose/runs``. When a binding file or ``state.md`` of a run
changes, the file is checked a moment later (writes are temp-file-and-rename):

- a binding file must name the binding its file name names, and agree with the journal, the
  run's source of truth: the run is reopened on a fresh store, whose repair rewrites any
  file the journal knows better; a file repair changes, or cannot make whole, is reported;
- ``state.md`` must be a rendering of this run (``# Execution State`` with ``run: <id>``).

Reports are kept per run (the ``prose://runs/{id}/state`` resource lists them), logged on
the ``openprose.mcp_server.watch`` logger, and passed to ``on_report`` so the server can send
``resources/updated``. Nothing is accepted silently.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from openprose.mcp_server.updates import RunUpdates
from openprose.state import BindingRef, StateError, open_store

logger = logging.getLogger(__name__)
SETTLE_S = 0.2  # a write is checked once its path has been quiet this long
STATE_HEADER = "# Execution State"


@dataclass(frozen=True, slots=True)
class OutsideWrite:
    run_id: str
    path: str  # relative to the run directory: bindings/x.md or state.md
    problem: str
    outcome: str  # "restored from the journal" or why it was left as found

    @property
    def binding(self) -> str | None:
        """The binding's resource name (``name`` or ``name@N``), for a binding file."""
        if not self.path.startswith("bindings/"):
            return None
        name, _, execution = self.path.removeprefix("bindings/").removesuffix(".md") \
            .partition("__")
        return f"{name}@{execution}" if execution else name

    def line(self) -> str:
        return f"run {self.run_id}: {self.path}: {self.problem}; {self.outcome}"


def _binding_ref(file_name: str) -> BindingRef | None:
    stem = file_name.removesuffix(".md")
    name, _, execution = stem.partition("__")
    if not name or (execution and not execution.isdigit()):
        return None
    return BindingRef(name, int(execution) if execution else None)


class RunWatcher(FileSystemEventHandler):
    """Checks what appears under ``.prose/runs`` while the server is up."""

    def __init__(self, project_root: str | Path, on_report: Callable[[OutsideWrite], None],
                 *, home: str | Path | None = None) -> None:
        self.project_root = Path(project_root).resolve()
        self.runs = self.project_root / ".prose" / "runs"
        self.home = home
        self.on_report = on_report
        self._reports: dict[str, list[OutsideWrite]] = {}
        self._timers: dict[Path, threading.Timer] = {}
        self._lock = threading.Lock()
        self._observer = Observer()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self.runs.mkdir(parents=True, exist_ok=True)
        self._observer.schedule(self, str(self.runs), recursive=True)
        self._observer.start()

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join()
        with self._lock:
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()

    def reports(self, run_id: str) -> list[OutsideWrite]:
        with self._lock:
            return list(self._reports.get(run_id, ()))

    # ------------------------------------------------------------------ events
    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type not in ("created", "modified", "moved"):
            return
        path = Path(str(event.dest_path if event.event_type == "moved" else event.src_path))
        if self._target(path) is None:
            return
        with self._lock:
            timer = self._timers.pop(path, None)
            if timer is not None:
                timer.cancel()
            timer = threading.Timer(SETTLE_S, self._settled, (path,))
            timer.daemon = True
            self._timers[path] = timer
        timer.start()

    def _target(self, path: Path) -> tuple[str, str] | None:
        """(run id, path in the run) for a top-level run's binding file or state.md."""
        try:
            parts = path.relative_to(self.runs).parts
        except ValueError:
            return None
        if len(parts) == 2 and parts[1] == "state.md":
            return parts[0], "state.md"
        if len(parts) == 3 and parts[1] == "bindings" and parts[2].endswith(".md") \
                and not parts[2].startswith("."):
            return parts[0], f"bindings/{parts[2]}"
        return None

    def _settled(self, path: Path) -> None:
        with self._lock:
            self._timers.pop(path, None)
        target = self._target(path)
        if target is None or not path.is_file() or (not (path.parent / "run.json").exists() \
                and target[1] == "state.md"):
            return
        run_id, inner = target
        try:
            report = self.check_state(run_id, path) if inner == "state.md" else \
                self.check_binding(run_id, inner, path)
        except (OSError, StateError) as exc:
            report = OutsideWrite(run_id, inner, f"could not be checked ({exc})",
                                  "left as found")
        if report is not None:
            self._report(report)

    # ------------------------------------------------------------------ checks
    def check_state(self, run_id: str, path: Path) -> OutsideWrite | None:
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = text.split("\n", 4)
        if lines[0] == STATE_HEADER and f"run: {run_id}" in lines[:4]:
            return None
        return OutsideWrite(run_id, "state.md", "not a rendering of this run by the server",
                            "left as found; the run's bindings and journal are unaffected")

    def check_binding(self, run_id: str, inner: str, path: Path) -> OutsideWrite | None:
        ref = _binding_ref(path.name)
        if ref is None:
            return OutsideWrite(run_id, inner, "not a binding file name", "left as found")
        before = path.read_bytes()
        store = open_store(self.project_root, "filesystem", home=self.home)
        try:
            run = store.open_run(run_id)  # repair: files the journal knows better are rewritten
            after = path.read_bytes() if path.is_file() else b""
            binding = run.read_binding(ref) if after else None
        finally:
            store.close()
        if after != before:
            return OutsideWrite(run_id, inner, "disagreed with the run's journal",
                                "restored from the journal")
        if binding is None or (binding.name, binding.execution_id) != \
                (ref.name, ref.execution_id):
            return OutsideWrite(run_id, inner, "malformed binding file (its header does not "
                                "name this binding)", "left as found: the journal has no "
                                "value to restore it from")
        return None

    def _report(self, report: OutsideWrite) -> None:
        with self._lock:
            self._reports.setdefault(report.run_id, []).append(report)
        logger.warning("outside write: %s", report.line())
        self.on_report(report)


@asynccontextmanager
async def watching(project_root: str | Path, updates: RunUpdates, *,
                   home: str | Path | None = None) -> AsyncIterator[RunWatcher]:
    """Watch the project's runs for the server's lifespan; each report becomes a
    ``resources/updated`` for the run (and the binding) it concerns."""
    loop = asyncio.get_running_loop()

    def on_report(report: OutsideWrite) -> None:
        bindings = [report.binding] if report.binding else []
        asyncio.run_coroutine_threadsafe(updates.changed(report.run_id, bindings), loop)

    watcher = RunWatcher(project_root, on_report, home=home)
    watcher.start()
    try:
        yield watcher
    finally:
        watcher.stop()
