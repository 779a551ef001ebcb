"""``prose worker``: claim queued runs and drive them with the engine, as ``prose resume``
would on this machine.

A claimed run is resumed from its journal (a run never started has an empty one): finished
sessions are reused, the run's driver lock (a PostgreSQL session lock) makes this worker its
only driver, and a run whose lock another process holds is tried again a second later. Each
run has a thread and an event loop of its own; a worker's runs share one store.
procrastinate's heartbeats tell which workers are alive; one worker at a time (whoever holds
the sweeper's advisory lock) hands the jobs of workers silent for
``OPENPROSE_WORKER_STALLED_AFTER`` seconds back to the queue, where another worker resumes
them. A stopping worker waits ``OPENPROSE_WORKER_STOP_TIMEOUT`` seconds for its runs, then
interrupts them and hands them back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import logging
import os
import socket
import sys
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import openprose.language.parser  # as skills below: loaded on first use, here before a run
import openprose.language.validator  # noqa: F401
from openprose import state
from openprose.engine import runner
from openprose.engine.errors import EngineError, ProviderUnavailable
from openprose.engine.interpreter import RunBudget
from openprose.engine.permissions import ALLOW_BASH, ALLOW_NETWORK, ALLOW_UNSANDBOXED
from openprose.engine.provider import (
    JudgeRequest,
    Provider,
    SessionIO,
    SessionRequest,
    SessionResult,
    Verdict,
)
from openprose.engine.skills import resolve_skills
from openprose.engine.work_tools import default_setup
from openprose.workers import queue as q

#: How often a waiting session asks for a free slot of its provider's cap.
SLOT_POLL_SECONDS = 0.05
#: Seconds of silence after which a worker's record is deleted (at least).
PRUNE_AFTER = 300.0
#: Seconds at least between renders of a run's state.md while a worker drives it: a
#: render costs about a session's CPU (rendering, a round trip), and a worker drives many
#: runs at once; the run's end is always rendered.
RENDER_INTERVAL = 2.0


class HandedBack(EngineError):
    """A stopping worker interrupted this run and gives it back to the queue."""


@dataclass(frozen=True)
class WorkerSettings:
    """A worker's timing and caps, from the project's settings."""

    heartbeat: float = 2.0
    stalled_after: float = 10.0
    stop_timeout: float = 30.0
    #: provider name -> most sessions in flight across every worker
    caps: Mapping[str, int] | None = None

    @classmethod
    def of(cls, env: Mapping[str, str]) -> WorkerSettings:
        """The settings ``env`` gives (a bad number raises :class:`EngineError` naming it)."""
        def seconds(key: str, default: float) -> float:
            raw = env.get(key)
            try:
                value = float(raw) if raw else default
            except ValueError:
                raise EngineError(f"{key}: not a number of seconds ({raw!r})") from None
            if value < 0 or (value == 0 and key != q.WORKER_STOP_SETTING):
                raise EngineError(f"{key}: must be more than 0 seconds ({raw!r})")
            return value

        caps: dict[str, int] = {}
        for key, raw in env.items():
            if key.startswith(q.MAX_SESSIONS_PREFIX) and raw:
                if not raw.strip().isdigit() or int(raw) < 1:
                    raise EngineError(f"{key}: must be a whole number of sessions, 1 or more "
                                      f"({raw!r})")
                caps[key[len(q.MAX_SESSIONS_PREFIX):].lower()] = int(raw)
        heartbeat = seconds(q.WORKER_HEARTBEAT_SETTING, cls.heartbeat)
        stalled = seconds(q.WORKER_STALLED_SETTING, max(cls.stalled_after, 5 * heartbeat))
        if stalled <= heartbeat:
            raise EngineError(f"{q.WORKER_STALLED_SETTING} ({stalled:g} s) must be longer than "
                              f"{q.WORKER_HEARTBEAT_SETTING} ({heartbeat:g} s)")
        return cls(heartbeat, stalled, seconds(q.WORKER_STOP_SETTING, cls.stop_timeout), caps)


def _key(*parts: str) -> int:
    """A 64-bit advisory lock key naming ``parts``."""
    digest = hashlib.sha256("\0".join(("openprose", *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class Slots:
    """The global cap on sessions per provider: slot ``i`` of a provider is a session-level
    advisory lock this process holds on one connection while a session uses it, so a dead
    worker's slots free with its connection. Sessions of this process wait in turn (first
    come, first served, whichever run they belong to)."""

    def __init__(self, url: str, schema: str, caps: Mapping[str, int]) -> None:
        self.url, self.schema, self.caps = url, schema, dict(caps)
        self.conn: Any = None
        self.held: set[int] = set()
        self.turn = asyncio.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None

    async def open(self) -> None:
        import psycopg

        self.loop = asyncio.get_running_loop()
        self.conn = await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, application_name="openprose worker slots")

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    @contextlib.asynccontextmanager
    async def slot(self, provider: str) -> AsyncIterator[None]:
        cap = self.caps.get(provider)
        if cap is None:
            yield
            return
        keys = [_key("slot", self.schema, provider, str(i)) for i in range(cap)]
        taking = asyncio.run_coroutine_threadsafe(self._take_turn(keys), self._home())
        try:
            key = await asyncio.wrap_future(taking)
        except asyncio.CancelledError:  # a slot taken meanwhile is given back
            taking.add_done_callback(self._give_back_taken)
            raise
        try:
            yield
        finally:
            await asyncio.shield(asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(self._give_back(key), self._home())))

    def _home(self) -> asyncio.AbstractEventLoop:
        """The worker's loop, where the slots' connection lives: each run's sessions run on
        the run's own loop (see :func:`_on_own_loop`) and take their slots through it."""
        assert self.loop is not None, "Slots.open() first"
        return self.loop

    def _give_back_taken(self, taking: concurrent.futures.Future[int]) -> None:
        if not taking.cancelled() and taking.exception() is None:
            asyncio.run_coroutine_threadsafe(self._give_back(taking.result()), self._home())

    async def _give_back(self, key: int) -> None:
        self.held.discard(key)
        await self.conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    async def _take_turn(self, keys: list[int]) -> int:
        async with self.turn:
            return await self._take(keys)

    async def _take(self, keys: list[int]) -> int:
        while True:
            for key in keys:
                if key in self.held:  # advisory locks nest within a connection
                    continue
                row = await (await self.conn.execute("SELECT pg_try_advisory_lock(%s)",
                                                     (key,))).fetchone()
                if row[0]:
                    self.held.add(key)
                    return key
            await asyncio.sleep(SLOT_POLL_SECONDS)


class CappedProvider(Provider):
    """``inner`` with each session and judgment holding one of its provider's slots."""

    def __init__(self, inner: Provider, slots: Slots) -> None:
        self.inner, self.slots = inner, slots
        self.name = inner.name
        self.reads_context = inner.reads_context
        self.judges_by_reference = inner.judges_by_reference

    async def run_session(self, request: SessionRequest, io: SessionIO) -> SessionResult:
        async with self.slots.slot(self.name):
            return await self.inner.run_session(request, io)

    async def judge(self, request: JudgeRequest) -> Verdict:
        async with self.slots.slot(self.name):
            return await self.inner.judge(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:  # record_commit and the like
        return getattr(self.inner, name)


def _worker_env(root: Path) -> dict[str, str]:
    """The project's settings without the consent ones: a run gets the consent recorded
    when it was queued, never this machine's."""
    grants = (ALLOW_BASH, ALLOW_NETWORK, ALLOW_UNSANDBOXED)
    return {k: v for k, v in state.settings(root).items() if k not in grants}


def task(root: Path, shared: state.StateStore, slots: Slots | None) -> Callable[..., Any]:
    """The job's body: drive one run to its end (or to a pause, a budget, a failure) on
    its own loop, in a store over the worker's ``shared`` one."""
    from procrastinate.job_context import AbortReason

    async def drive_run(context: Any, run_id: str) -> str:
        try:
            return await _on_own_loop(_drive(root, shared, slots, run_id), f"run {run_id}")
        except asyncio.CancelledError:
            if context.abort_reason() == AbortReason.SHUTDOWN:
                raise HandedBack(f"run {run_id} handed back by a stopping worker") from None
            raise

    return drive_run


async def _drive(root: Path, shared: state.StateStore, slots: Slots | None,
                 run_id: str) -> str:
    """Resume ``run_id`` from its journal and drive it; how it ended. The run is read once
    (``resume_job`` hands its store, the run cached in it, on to ``execute``)."""
    try:
        job = runner.resume_job(run_id, root, "postgres", store=shared.fresh())
    except EngineError as err:
        cause = err.__cause__
        if isinstance(cause, state.RunLocked):
            raise cause from None  # its driver may be dying: again in a second
        if isinstance(cause, state.RunNotFound):
            return "gone"
        _log.warning("run %s cannot be driven: %s", run_id, err)
        return "refused"
    try:
        provider = _prepare(job, root, slots)
    except (EngineError, state.StateError) as err:
        _release(job)
        q.interrupt(root, run_id, f"a worker could not drive it: {err}")
        return "refused"
    except BaseException:
        _release(job)
        raise
    return (await runner.execute(job, provider)).status  # in the store it was read in


T = TypeVar("T")


async def _on_own_loop(body: Coroutine[Any, Any, T], name: str) -> T:
    """Run ``body`` on an event loop of its own, on a thread of its own, as ``prose run``
    drives a run: the engine makes state writes (a PostgreSQL round trip each) on its loop
    whenever only one of the run's sessions is in flight, and on a loop shared by the
    worker's runs each would hold up every other run and the worker's heartbeats.
    Cancelling this cancels ``body`` on its loop and waits until it has stopped."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    inner: concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, asyncio.Task[T]]] = \
        concurrent.futures.Future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    async def run() -> T:
        task = asyncio.current_task()
        assert task is not None
        inner.set_result((asyncio.get_running_loop(), task))  # type: ignore[arg-type]
        return await body

    def main() -> None:
        try:
            result = asyncio.run(run())
        except BaseException as err:  # handed to the waiting task
            if not inner.done():  # it failed before starting
                inner.set_exception(err)
            loop.call_soon_threadsafe(settle, None, err)
        else:
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=main, name=name, daemon=True).start()
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):  # none: it ended by itself
            run_loop, task = await asyncio.wrap_future(inner)
            run_loop.call_soon_threadsafe(task.cancel)
        while not done.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(done)
        raise


def _release(job: runner.Job) -> None:
    if job.driver is not None:
        job.driver.release()
    if job.store is not None:
        job.store.close()


def _prepare(job: runner.Job, root: Path, slots: Slots | None) -> Provider:
    """Set ``job`` up exactly as it was queued; the provider to drive it with."""
    how = job.recorded
    job.settings = {key: value for key, value in how.items() if key != "backend"}
    job.max_concurrency = int(how.get("max_concurrency") or job.max_concurrency)
    job.render_interval = RENDER_INTERVAL
    if how.get("max_tokens") or how.get("max_cost"):
        job.budget = RunBudget(how.get("max_tokens"), how.get("max_cost"))
    consent = how.get("consent") or {}
    env = _worker_env(root)
    job.work = default_setup(root, env, bash=bool(consent.get("bash")),
                             network=bool(consent.get("network")),
                             unsandboxed=bool(consent.get("unsandboxed")))
    job.work.skills, warnings = resolve_skills(job.program, job.file, root, env)
    for warning in warnings:
        _log.warning("run %s: %s", job.run_id, warning)
    script = how.get("script")
    try:
        provider = runner.make_provider(how.get("provider") or "anthropic",
                                        Path(script) if script else None, root)
    except ProviderUnavailable as err:
        raise EngineError(str(err)) from None
    return CappedProvider(provider, slots) if slots is not None else provider


async def _sweep(app: Any, url: str, schema: str, queue: str, every: float,
                 stalled_after: float) -> None:
    """Wait for the sweeper's lock (the server grants it when its holder lets go or its
    connection ends: nothing is asked meanwhile), then hand the jobs of silent workers back
    every ``every`` seconds."""
    import psycopg

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True,
                                                 application_name="openprose worker sweeper")
    try:  # a server's (or role's) timeouts must not end the wait
        await conn.execute("SET statement_timeout = 0; SET lock_timeout = 0")
        await conn.execute("SELECT pg_advisory_lock(%s)", (_key("sweeper", schema, queue),))
        while True:
            for stalled in await app.job_manager.get_stalled_jobs(
                    queue=queue, task_name=q.TASK, seconds_since_heartbeat=stalled_after):
                try:
                    await app.job_manager.retry_job(stalled)
                except Exception as err:  # finished or retried meanwhile
                    _log.info("job %s not handed back: %s: %s", stalled.id,
                              type(err).__name__, err)
            await asyncio.sleep(every)
    finally:
        await conn.close()


_log = logging.getLogger("openprose.worker")


class _OneLine(logging.Formatter):
    """Log records as one line each: a worker's log never shows a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage().splitlines()[0] if record.getMessage() else ""
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})"
        return f"prose worker: {text}"

    def formatException(self, ei: Any) -> str:
        return ""


def _logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    for name, level in (("openprose.worker", logging.INFO), ("procrastinate", logging.ERROR),
                        ("psycopg", logging.ERROR)):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False


async def serve(root: Path, concurrency: int, queue: str,
                on_ready: Callable[[str], None] | None = None) -> None:
    """Take runs from ``queue`` until stopped (SIGTERM, Ctrl-C)."""
    _logging()
    url, schema = q.connection(root)
    config = WorkerSettings.of(state.settings(root))
    await asyncio.to_thread(q.install, url, schema)
    name = f"{socket.gethostname()}:{os.getpid()}"
    app = q.make_app(url, schema)
    slots = Slots(url, schema, config.caps) if config.caps else None
    from procrastinate import RetryStrategy

    shared = await asyncio.to_thread(state.open_store, root, "postgres")
    app.task(name=q.TASK, pass_context=True,
             retry=RetryStrategy(wait=1, retry_exceptions=[state.RunLocked, HandedBack])
             )(task(root.resolve(), shared, slots))
    qualified = q.queue_name(schema, queue)
    try:
        if slots is not None:
            await slots.open()
        async with app.open_async():
            sweeper = asyncio.create_task(_sweep(app, url, schema, qualified, config.heartbeat,
                                                 config.stalled_after))
            if on_ready is not None:
                on_ready(name)
            try:
                await app.run_worker_async(
                    queues=[qualified], concurrency=concurrency, name=name,
                    update_heartbeat_interval=config.heartbeat,
                    # a worker's record is deleted (by the next worker to start) only
                    # long after its jobs were handed back: one merely slow keeps its own
                    stalled_worker_timeout=max(PRUNE_AFTER, 10 * config.stalled_after),
                    fetch_job_polling_interval=config.heartbeat,
                    abort_job_polling_interval=config.heartbeat,
                    shutdown_graceful_timeout=config.stop_timeout)
            finally:
                sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeper
    finally:
        if slots is not None:
            await slots.close()
        shared.close()
