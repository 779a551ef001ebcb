"""Noticing writes to filesystem runs that do not come from the state API.

A watchdog observer watches ``.prose/runs``. When a binding file or ``state.md`` of a run
changes, the run's changed files are checked together once they have been quiet a moment
(writes are temp-file-and-rename; one reopen of the run covers a burst of writes):

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
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from watchdog.events import (
    FileClosedEvent,
    FileCreatedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from openprose.mcp_server.updates import RunUpdates
from openprose.state import Binding, BindingRef, DamagedState, StateError, open_store

logger = logging.getLogger(__name__)
SETTLE_S = 0.2  # a write is checked once its path has been quiet this long
STATE_HEADER = "# Execution State"
STOP_WAIT_S = 30.0  # stop() waits at most this long for a check under way
#: After a check of a run, the next waits this many times as long as the check took: a check
#: reopens the run (reading its whole journal, holding the interpreter lock the run's own
#: writer needs), so checks at every pause of a long run made each round cost more than the
#: last; resting keeps them to a tenth of the time however long the run grows.
CHECK_REST = 9.0
#: What the kernel reports: a file created, renamed into place, or closed after writing. Not
#: each write (journal appends would wake the watcher on every record) nor opens and reads.
EVENTS = [FileCreatedEvent, FileMovedEvent, FileClosedEvent]


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


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _names(binding: Binding, ref: BindingRef) -> bool:
    return (binding.name, binding.execution_id) == (ref.name, ref.execution_id)


class RunWatcher(FileSystemEventHandler):
    """Checks what appears under ``.prose/runs`` while the server is up."""

    def __init__(self, project_root: str | Path, on_report: Callable[[OutsideWrite], None],
                 *, home: str | Path | None = None) -> None:
        self.project_root = Path(project_root).resolve()
        self.runs = self.project_root / ".prose" / "runs"
        self.home = home
        self.on_report = on_report
        self._reports: dict[str, list[OutsideWrite]] = {}
        self._due: dict[str, float] = {}  # run id -> when its files will have been quiet
        self._rested: dict[str, float] = {}  # run id -> when it may be checked again
        self._pending: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._checking = False
        self._stopped = False
        self._observer = Observer()
        self._settler = threading.Thread(target=self._settle, name="prose-watch-settle",
                                         daemon=True)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self.runs.mkdir(parents=True, exist_ok=True)
        self._observer.schedule(self, str(self.runs), recursive=True, event_filter=EVENTS)
        self._observer.start()
        self._settler.start()

    def stop(self) -> None:
        """Stop watching; returns once a check already under way has ended. Nothing is
        reported after this (the server it would tell is going away)."""
        self._observer.stop()
        self._observer.join()
        with self._lock:
            self._stopped = True
            self._due.clear()
            self._pending.clear()
            self._wake.notify_all()
            self._wake.wait_for(lambda: not self._checking, timeout=STOP_WAIT_S)

    def reports(self, run_id: str) -> list[OutsideWrite]:
        with self._lock:
            return list(self._reports.get(run_id, ()))

    # ------------------------------------------------------------------ events
    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type not in ("created", "closed", "moved"):
            return
        path = Path(str(event.dest_path if event.event_type == "moved" else event.src_path))
        target = self._target(path)
        if target is None:
            return
        run_id = target[0]
        with self._lock:  # one check per run once its files have been quiet for SETTLE_S
            self._pending.setdefault(run_id, set()).add(target[1])
            idle = not self._due  # otherwise the settler wakes for an earlier deadline
            self._due[run_id] = max(time.monotonic() + SETTLE_S,
                                    self._rested.get(run_id, 0.0))
            if idle:
                self._wake.notify()

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

    def _settle(self) -> None:
        """The settler thread: checks each run whose files have been quiet long enough."""
        with self._lock:
            while not self._stopped:
                now = time.monotonic()
                ready = [run_id for run_id, due in self._due.items() if due <= now]
                if not ready:
                    self._wake.wait(min(self._due.values()) - now if self._due else None)
                    continue
                batches = [(run_id, sorted(self._pending.pop(run_id, ()))) for run_id in ready]
                for run_id in ready:
                    del self._due[run_id]
                self._checking = True
                self._lock.release()
                rested = {}
                try:
                    for run_id, changed in batches:
                        began = time.monotonic()
                        try:
                            self._check(run_id, changed)
                        except Exception:  # a bug in a check must not stop the watching
                            logger.exception("checking run %s failed", run_id)
                        ended = time.monotonic()
                        rested[run_id] = ended + CHECK_REST * (ended - began)
                finally:
                    self._lock.acquire()
                    now = time.monotonic()
                    self._rested = {k: v for k, v in (self._rested | rested).items() if v > now}
                    self._checking = False
                    self._wake.notify_all()

    def _check(self, run_id: str, changed: list[str]) -> None:
        run_dir = self.runs / run_id
        if not (run_dir / "run.json").is_file():  # not a filesystem run
            return
        bindings = [inner for inner in changed if inner != "state.md"]
        try:
            reports = self.check_bindings(run_id, bindings) if bindings else []
            if "state.md" in changed and (run_dir / "state.md").is_file():
                reports.extend(filter(None, [self.check_state(run_id, run_dir / "state.md")]))
        except (OSError, StateError) as exc:
            reports = [OutsideWrite(run_id, inner, f"could not be checked ({exc})",
                                    "left as found") for inner in changed]
        for report in reports:
            self._report(report)

    # ------------------------------------------------------------------ checks
    def check_state(self, run_id: str, path: Path) -> OutsideWrite | None:
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = text.split("\n", 4)
        if lines[0] == STATE_HEADER and f"run: {run_id}" in lines[:4]:
            return None
        return OutsideWrite(run_id, "state.md", "not a rendering of this run by the server",
                            "left as found; the run's bindings and journal are unaffected")

    def check_bindings(self, run_id: str, changed: list[str]) -> list[OutsideWrite]:
        """Reopen the run once (its repair rewrites what the journal knows better), then
        judge each changed binding file by what repair did and by its header."""
        run_dir = self.runs / run_id
        before = {inner: _read(run_dir / inner) for inner in changed}
        store = open_store(self.project_root, "filesystem", home=self.home)
        reports = []
        try:
            try:
                run = store.open_run(run_id)
            except DamagedState as damage:  # a file repair cannot restore: named in it
                return [OutsideWrite(run_id, inner, f"malformed binding file ({damage})",
                                     "left as found: the journal has no value to restore it "
                                     "from") if inner in str(damage) else
                        OutsideWrite(run_id, inner, f"could not be checked ({damage})",
                                     "left as found") for inner in changed]
            for inner in changed:
                ref = _binding_ref(inner.removeprefix("bindings/"))
                after = _read(run_dir / inner)
                if ref is None:
                    reports.append(OutsideWrite(run_id, inner, "not a binding file name",
                                                "left as found"))
                elif after != before[inner]:
                    reports.append(OutsideWrite(run_id, inner, "disagreed with the run's "
                                                "journal", "restored from the journal"))
                elif after is not None and not _names(run.read_binding(ref), ref):
                    reports.append(OutsideWrite(
                        run_id, inner, "malformed binding file (its header does not name this "
                        "binding)", "left as found: the journal has no value to restore it from"))
        finally:
            store.close()
        return reports

    def _report(self, report: OutsideWrite) -> None:
        with self._lock:
            if self._stopped:
                return
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
