"""The run queue: procrastinate's tables in the runs' schema, one job per queued run.

A job names only its run; everything a worker needs (program, inputs, provider and script,
budget, the consent given at enqueue time) is in the run itself, recorded when it was queued.
The job's ``queueing_lock`` is the run id, so a run is never queued twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
from pathlib import Path
from typing import Any

from openprose import state
from openprose.engine import runner
from openprose.engine.permissions import Grants
from openprose.state.config import (
    postgres_schema,
    postgres_scrubbed,
    postgres_shown,
    postgres_url,
)

#: The task every job runs.
TASK = "openprose.drive_run"
#: The queue a run goes to and a worker takes from unless told otherwise.
DEFAULT_QUEUE = "runs"
#: Advisory lock serializing the installation of the queue's tables.
_SCHEMA_LOCK = 4242002

WORKER_HEARTBEAT_SETTING = "OPENPROSE_WORKER_HEARTBEAT"
WORKER_STALLED_SETTING = "OPENPROSE_WORKER_STALLED_AFTER"
WORKER_STOP_SETTING = "OPENPROSE_WORKER_STOP_TIMEOUT"
#: ``OPENPROSE_MAX_SESSIONS_<PROVIDER>``: sessions of that provider in flight across workers.
MAX_SESSIONS_PREFIX = "OPENPROSE_MAX_SESSIONS_"


def queue_name(schema: str, queue: str) -> str:
    """procrastinate's name of ``queue``: qualified by the schema, because PostgreSQL's
    notifications (new job, abort request) are per database, not per schema."""
    return f"{schema}:{queue}"


def connection(root: Path) -> tuple[str, str]:
    """The project's PostgreSQL URL and schema (its settings), or :class:`BackendUnavailable`."""
    url = postgres_url(root)
    if not url:
        raise state.BackendUnavailable(
            "workers need PostgreSQL: set OPENPROSE_POSTGRES_URL in .prose/.env or the "
            "environment (or DATABASE_URL)")
    return url, postgres_schema(root)


def make_app(url: str, schema: str, max_connections: int = 4) -> Any:
    """A procrastinate app on ``schema`` (its tables live beside the runs')."""
    import procrastinate

    connector = procrastinate.PsycopgConnector(
        conninfo=url, min_size=1, max_size=max_connections, pool_factory=_pool,
        kwargs={"options": f"-c search_path={schema}",
                "application_name": "openprose worker queue"})
    return procrastinate.App(connector=connector)


def _pool(**kwargs: Any) -> Any:
    """procrastinate's pool, checking a connection it hands out only when the server has
    sent something on it while it was idle (an idle connection the server ended has its
    goodbye or its end waiting): procrastinate's check costs a round trip before every
    query (fetching a job, finishing one, each heartbeat), as many as the queries."""
    import psycopg_pool

    return psycopg_pool.AsyncConnectionPool(**{**kwargs, "check": _check_if_stirred})


async def _check_if_stirred(conn: Any) -> None:
    import psycopg_pool

    if conn.closed or select.select([conn.fileno()], [], [], 0)[0]:
        await psycopg_pool.AsyncConnectionPool.check_connection(conn)


def install(url: str, schema: str) -> None:
    """Create the queue's tables in ``schema`` unless they are there (one installer at a
    time). Upgrading procrastinate past a schema change needs its migrations applied."""
    import psycopg
    from procrastinate.schema import SchemaManager

    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
    except psycopg.Error as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise state.BackendUnavailable(f"cannot connect to PostgreSQL at {postgres_shown(url)}: "
                                       f"{postgres_scrubbed(reason, url)}") from None
    with conn:
        check_session_pooling(conn)
        conn.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK,))
        try:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            found = conn.execute("SELECT to_regclass(%s)",
                                 (f'"{schema}".procrastinate_jobs',)).fetchone()
            if found is None or found[0] is None:
                conn.execute(f'SET search_path = "{schema}"')
                conn.execute(SchemaManager.get_schema())
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_SCHEMA_LOCK,))


def check_session_pooling(conn: Any) -> None:
    """Refuse a pooler in transaction mode (PgBouncer's ``pool_mode = transaction``): a run's
    driver lock and the session cap are session locks, which need one server connection
    for as long as they are held. Best effort: seen only when consecutive statements of one
    connection reach different server processes."""
    pids = {conn.execute("SELECT pg_backend_pid()").fetchone()[0] for _ in range(4)}
    if len(pids) > 1:
        raise state.BackendUnavailable(
            "PostgreSQL is reached through a pooler in transaction mode (statements of one "
            "connection went to different server processes): workers need session locks; "
            "point OPENPROSE_POSTGRES_URL at the server or at a pool in session mode")


def enqueue(job: runner.Job, grants: Grants, queue: str = DEFAULT_QUEUE) -> tuple[str, int]:
    """Create ``job``'s run as queued, recording how it is to run (provider, script,
    concurrency, budget and ``grants``: a worker never gives more), and queue it.
    Returns (run id, job id)."""
    return enqueue_all([(job, grants)], queue)[0]


def enqueue_all(jobs: list[tuple[runner.Job, Grants]], queue: str = DEFAULT_QUEUE
                ) -> list[tuple[str, int]]:
    """:func:`enqueue` each of ``jobs`` (all of one project) through one store and one
    queue connection."""
    if not jobs:
        return []
    root = jobs[0][0].project_root
    url, schema = connection(root)
    store = state.open_store(root, "postgres")
    runs = []
    try:
        for job, grants in jobs:
            run = store.create_run(job.source, job.file or None, queued=True)  # "": inline
            consent = {"bash": grants.bash, "network": grants.network,
                       "unsandboxed": grants.unsandboxed}
            run.record_result(runner.SETTINGS_KEY, status="settings",
                              meta={**job.settings, "backend": store.kind, "consent": consent})
            runner.record_given(run, job.inputs)
            runs.append(run.id)
    finally:
        store.close()
    install(url, schema)
    job_ids: list[int] = []
    try:
        asyncio.run(_defer(url, schema, runs, queue, job_ids))
    except Exception as err:
        left = runs[len(job_ids):]
        for run_id in left:
            with contextlib.suppress(state.StateError):
                interrupt(root, run_id, f"could not be queued: {err}")
        raise state.StateError(f"run {left[0]}{' and others' if len(left) > 1 else ''} "
                               f"could not be queued: {err}") from None
    return list(zip(runs, job_ids, strict=True))


async def _defer(url: str, schema: str, runs: list[str], queue: str, job_ids: list[int]
                 ) -> None:
    """Queue ``runs`` in turn, appending each one's job id to ``job_ids``."""
    app = make_app(url, schema, max_connections=1)
    async with app.open_async():
        for run_id in runs:
            deferrer = app.configure_task(TASK, queue=queue_name(schema, queue),
                                          queueing_lock=run_id)
            job_ids.append(int(await deferrer.defer_async(run_id=run_id)))


def cancel(root: Path, run_id: str) -> str:
    """Cancel ``run_id``'s job: a queued run ends interrupted at once ("queued"), a run a
    worker drives is interrupted by that worker ("running"); "none" when it has no live job
    (it was never queued, or has ended)."""
    url, schema = connection(root)
    install(url, schema)
    outcome = asyncio.run(_cancel(url, schema, run_id))
    if outcome == "queued":
        interrupt(root, run_id, "cancelled before a worker took it")
    return outcome


async def _cancel(url: str, schema: str, run_id: str) -> str:
    app = make_app(url, schema, max_connections=1)
    outcome = "none"
    async with app.open_async():
        for found in await app.job_manager.list_jobs_async(queueing_lock=run_id):
            status = found.status
            if status in ("todo", "doing") and found.id is not None and \
                    await app.job_manager.cancel_job_by_id_async(found.id, abort=True):
                outcome = "queued" if status == "todo" else "running"
    return outcome


def interrupt(root: Path, run_id: str, why: str) -> None:
    """Leave a run nobody will drive interrupted with ``why``: ``prose resume`` continues
    it here."""
    store = state.open_store(root, "postgres")
    try:
        with store.driver_lock(run_id):
            store.open_run(run_id).finish("interrupted", why)
    finally:
        store.close()
