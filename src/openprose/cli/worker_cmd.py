"""``prose worker`` and ``prose cancel``: the pool of workers driving queued runs
(``prose run --state postgres --detach``) and cancelling a queued or running one. Both need
the ``workers`` extra (procrastinate)."""

from __future__ import annotations

import asyncio
import importlib.util
import re
import sys
from pathlib import Path

import click

from openprose.cli.common import emit_json, fail, find_run, json_option, project_option, stores

_QUEUE = re.compile(r"^[A-Za-z0-9_.-]{1,60}$")
_EXTRA = "the workers extra is not installed: pip install 'openprose[workers]'"


def check_queue(command: str, queue: str) -> str:
    """``queue`` when it is a usable queue name, else a refusal naming it."""
    if not _QUEUE.match(queue):
        fail(command, f"--queue {queue!r}: letters, digits, '_', '.' and '-' only "
                      "(at most 60)", 2)
    if importlib.util.find_spec("procrastinate") is None:
        fail(command, _EXTRA, 2)
    return queue


@click.command("worker")
@click.option("--concurrency", type=click.IntRange(1, 1000), default=4, show_default=True,
              help="Most runs this worker drives at once.")
@click.option("--queue", default="runs", show_default=True,
              help="The queue to take runs from (prose run --detach --queue).")
@project_option
def worker_command(concurrency: int, queue: str, project: Path) -> None:
    """Drive queued runs (prose run --state postgres --detach) until stopped. Any number of
    workers on any machines may share one database; a dead worker's runs are taken over.
    SIGTERM or Ctrl-C stops it gracefully (OPENPROSE_WORKER_STOP_TIMEOUT)."""
    check_queue("worker", queue)
    from openprose.errors import OpenProseError
    from openprose.workers.worker import serve

    def ready(name: str) -> None:
        click.echo(f"worker {name} takes runs from queue {queue!r}, up to {concurrency} at "
                   "once", err=True)
        sys.stderr.flush()

    try:
        asyncio.run(serve(project, concurrency, queue, ready))
    except OpenProseError as err:
        fail("worker", str(err), 2)
    except KeyboardInterrupt:
        click.echo("prose worker: stopped at once; its runs are taken over by other workers",
                   err=True)
        sys.exit(130)
    except Exception as err:  # the database went away, or the queue failed
        fail("worker", f"stopped by {type(err).__name__}: "
                       f"{(str(err).splitlines() or [''])[0]}; its runs are taken over by "
                       "other workers")
    click.echo("prose worker: stopped", err=True)


@click.command("cancel")
@click.argument("run_id")
@project_option
@json_option
def cancel_command(run_id: str, project: Path, as_json: bool) -> None:
    """Cancel a queued run, or interrupt a run a worker drives (wherever it runs). It stays
    resumable: prose resume RUN continues it."""
    if importlib.util.find_spec("procrastinate") is None:
        fail("cancel", _EXTRA, 2)
    from openprose.errors import OpenProseError
    from openprose.workers.queue import cancel

    with stores(project, "postgres", "cancel") as opened:
        _, run_id = find_run(opened, run_id, "cancel")
    try:
        outcome = cancel(project, run_id)
    except OpenProseError as err:
        fail("cancel", str(err))
    if as_json:
        emit_json({"run_id": run_id, "cancelled": outcome})
    if outcome == "none":
        fail("cancel", f"run {run_id} is neither queued nor driven by a worker")
    if not as_json:
        click.echo(f"run {run_id}: " + ("cancelled before a worker took it" if outcome ==
                                        "queued" else "its worker is told to interrupt it"),
                   err=True)
