"""Runs the engine drives inside the server: guided runs (the host answers through tools)
and delegated runs (a provider the server has answers).

Each :class:`EngineRun` is one asyncio task running :func:`openprose.engine.runner.execute`
on an existing run (start and resume are the same: the engine reuses what the journal holds).
The tasks belong to the server: :meth:`EngineRuns.aclose` interrupts them when it shuts
down, leaving every run resumable.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openprose.engine import EngineError, Options, Provider, runner
from openprose.engine.events import Event
from openprose.engine.interpreter import after_ready_work
from openprose.engine.permissions import Consent, ConsentRequest
from openprose.engine.work_tools import default_setup
from openprose.mcp_server.guided import HostProvider

Watcher = Callable[[Event], None]


@dataclass
class RunProgress:
    """What a run has done so far, from the engine's events."""

    line: int = 0
    statement: str = ""
    done: int = 0
    reused: int = 0
    in_flight: int = 0
    failed: int = 0
    verdicts: int = 0
    tokens: int = 0

    def note(self, event: Event, lines: list[str]) -> None:
        kind = event.kind
        if kind == "statement" and 0 < event.line <= len(lines):
            self.line, self.statement = event.line, lines[event.line - 1].strip()[:80]
        elif kind == "session_start":
            self.in_flight += 1
        elif kind in ("session_end", "session_failed"):
            self.in_flight -= 1
            self.done += kind == "session_end"
            self.failed += kind == "session_failed"
            self.tokens += event.tokens
        elif kind == "session_reused":
            self.reused += 1
        elif kind in ("verdict", "verdict_reused"):
            self.verdicts += 1

    def line_text(self) -> str:
        return (f"line {self.line}: {self.statement} · sessions {self.done} done, "
                f"{self.in_flight} in flight, {self.reused} reused")


@dataclass
class EngineRun:
    """One run the engine drives in this server."""

    run_id: str
    mode: str  # guided | delegated
    provider: Provider
    job: runner.Job
    progress: RunProgress = field(default_factory=RunProgress)
    outcome: runner.Outcome | None = None
    watchers: list[Watcher] = field(default_factory=list)
    on_end: Callable[[EngineRun], Any] | None = None
    task: asyncio.Task[None] | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    #: Who answers the run's consent questions now (the client of a run_program call in
    #: flight, through elicitation); ``None``: nobody, and such calls are refused.
    consent: Consent | None = None

    @property
    def host(self) -> HostProvider | None:
        return self.provider if isinstance(self.provider, HostProvider) else None

    @property
    def live(self) -> bool:
        return self.task is not None and not self.task.done()

    @property
    def status(self) -> str:
        return "running" if self.outcome is None else self.outcome.status

    def start(self) -> None:
        lines = self.job.source.splitlines()
        self.job.mode = self.mode  # as its trace names it
        if self.job.work is None:
            self.job.work = default_setup(self.job.project_root, consent=self.ask)

        def listen(event: Event) -> None:
            self.progress.note(event, lines)
            if self.host is not None:
                self.host.observe(event)
            for watcher in list(self.watchers):
                watcher(event)

        self.task = asyncio.create_task(self._drive(listen), name=f"prose run {self.run_id}")

    async def _drive(self, listen: Watcher) -> None:
        try:
            self.outcome = await runner.execute(self.job, self.provider, listen)
        except asyncio.CancelledError:
            self.outcome = runner.Outcome(self.run_id, "interrupted",
                                          error="cancelled; resume_run continues it")
        except (EngineError, OSError, ValueError) as err:  # state or import trouble
            self.outcome = runner.Outcome(self.run_id, "failed",
                                          error=f"{type(err).__name__}: {err}")
        finally:
            if self.host is not None:
                self.host.close(f"run {self.run_id} has ended")
            self.finished.set()
            if self.on_end is not None:
                result = self.on_end(self)
                if asyncio.iscoroutine(result):
                    await result

    async def ask(self, request: ConsentRequest) -> str | None:
        """A consent question of the run, put to whoever can answer it now."""
        if self.consent is None:
            return None
        answer = self.consent(request)
        return await answer if inspect.isawaitable(answer) else answer

    async def cancel(self) -> None:
        """Interrupt the run: in-flight sessions end, the run is left resumable."""
        if self.task is not None and not self.task.done():
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    async def wait(self, timeout: float | None = None) -> bool:
        """True once the run has ended (within ``timeout`` seconds)."""
        try:
            await asyncio.wait_for(self.finished.wait(), timeout)
        except TimeoutError:
            return False
        return True


def prepare(run_id: str, project_root: Path, backend: str, max_concurrency: int) -> runner.Job:
    """The engine's job for an existing run: its stored program, recorded inputs, imports."""
    return runner.resume_job(run_id, project_root, backend,
                             options=Options(max_concurrency=max_concurrency,
                                             turn=after_ready_work))


class EngineRuns:
    """The engine runs of this server, by run id."""

    def __init__(self) -> None:
        self.runs: dict[str, EngineRun] = {}

    def get(self, run_id: str) -> EngineRun | None:
        return self.runs.get(run_id)

    def add(self, run: EngineRun) -> EngineRun:
        self.runs[run.run_id] = run
        return run

    def owner_of(self, token: str) -> EngineRun | None:
        """The guided run that issued ``token`` (pending or ended in this process)."""
        for run in self.runs.values():
            host = run.host
            if host is not None and (token in host.pending or token in host.ended):
                return run
        return None

    async def aclose(self) -> None:
        """Interrupt every live run (the server is going away); each stays resumable."""
        await asyncio.gather(*(run.cancel() for run in self.runs.values()),
                             return_exceptions=True)
