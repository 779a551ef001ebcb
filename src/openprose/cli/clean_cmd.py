"""``prose clean``: retention for a project's runs, on every backend, through the state API.
A running run is never removed."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from openprose.cli.common import (
    USAGE,
    Col,
    backends_for,
    console,
    emit_json,
    fail,
    fitted_table,
    json_option,
    project_option,
    size_text,
    state_option,
    stores,
    styled,
)
from openprose.cli.runs_cmd import human_duration, parse_time

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
AGE = re.compile(r"(\d+)([smhdw])\Z")


def parse_age(text: str) -> timedelta:
    match = AGE.match(text.strip().lower())
    if match is None:
        raise click.BadParameter(f"{text!r} is not an age like 30d, 12h, 2w or 90m")
    return timedelta(seconds=int(match.group(1)) * UNITS[match.group(2)])


def select(rows: list[dict[str, Any]], *, older_than: timedelta | None, keep: int | None,
           status: str | None, now: datetime) -> tuple[list[dict], list[dict]]:
    """(the runs to remove, the running runs that matched and stay). ``rows`` newest first;
    a run is removed when it matches every criterion given."""
    chosen = [row for row in rows if status is None or row["status"] == status]
    if keep is not None:
        chosen = chosen[keep:]
    if older_than is not None:
        chosen = [row for row in chosen if row["ended"] is not None
                  and now - row["ended"] >= older_than]
    running = [row for row in chosen if row["status"] in ("queued", "running")]
    return [row for row in chosen if row["status"] not in ("queued", "running")], running


def _size(path: Path) -> int:
    if not path.is_dir() or path.is_symlink():
        return 0
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


@click.command("clean")
@click.option("--older-than", "older_than", metavar="AGE",
              help="Remove runs that ended at least AGE ago (30d, 12h, 2w, 90m).")
@click.option("--keep", type=click.IntRange(0), metavar="N",
              help="Keep the N newest runs (of --status, when given).")
@click.option("--status", type=click.Choice(["completed", "failed", "interrupted"]),
              help="Only runs with this status.")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@state_option
@json_option
@project_option
def clean_command(older_than: str | None, keep: int | None, status: str | None,
                  dry_run: bool, backend: str | None, as_json: bool, project: Path) -> None:
    """Remove old runs: those matching every criterion given.

    A running run is never removed (nor one whose driver is alive). At least one of
    --older-than, --keep or --status is required; --dry-run shows the list first.
    """
    from openprose.state import StateError

    if older_than is None and keep is None and status is None:
        fail("clean", "say which runs to remove: --older-than AGE, --keep N and/or "
                      "--status STATUS (add --dry-run to see the list first)", USAGE)
    age = None
    if older_than is not None:
        try:
            age = parse_age(older_than)
        except click.BadParameter as err:
            fail("clean", f"--older-than: {err.message}", USAGE)
    now = datetime.now(UTC)
    removed: list[dict[str, Any]] = []
    errors: list[dict[str, str]] = []
    # Every configured store is opened, also with --state: a run exported to another
    # backend keeps its id and shares its directory, whose shared files must then stay.
    with stores(project, None, "clean") as opened:
        kinds = {store.kind for store in opened}
        if backend is not None and backend not in kinds:
            fail("clean", f"cannot open the {backend} store (see above)")
        every_store_open = kinds == set(backends_for(project, None))
        rows = []
        for store in opened:
            try:
                infos = store.list_runs()
            except StateError as err:
                click.echo(f"prose clean: cannot list {store.kind} runs: {err}", err=True)
                every_store_open = False
                continue
            for info in infos:
                ended = parse_time(info.updated) or parse_time(info.started)
                rows.append({"run_id": info.id, "backend": store.kind, "status": info.status,
                             "started": info.started, "ended": ended, "store": store})
        holders: dict[str, int] = {}
        for row in rows:
            holders[row["run_id"]] = holders.get(row["run_id"], 0) + 1
        rows = [row for row in rows if backend is None or row["backend"] == backend]
        rows.sort(key=lambda row: (row["started"], row["run_id"]), reverse=True)
        chosen, running = select(rows, older_than=age, keep=keep, status=status, now=now)
        for row in chosen:
            store = row.pop("store")
            row["bytes"] = _size(Path(store.run_location(row["run_id"])))
            if not dry_run:
                try:
                    store.delete_run(row["run_id"], keep_shared=holders[row["run_id"]] > 1
                                     or not every_store_open)
                except (StateError, OSError) as err:
                    errors.append({"run_id": row["run_id"], "error": str(err)})
                    continue
                holders[row["run_id"]] -= 1
            removed.append(row)
    for row in running:
        row.pop("store", None)
    _report(removed, running, errors, dry_run, as_json, now)
    if errors:
        raise SystemExit(1)


def _report(removed: list[dict], running: list[dict], errors: list[dict], dry_run: bool,
            as_json: bool, now: datetime) -> None:
    if as_json:
        emit_json({"dry_run": dry_run,
                   "removed": [{**row, "ended": _stamp(row["ended"]),
                                "age_s": _age(row, now)} for row in removed],
                   "kept_running": [row["run_id"] for row in running], "errors": errors})
        return
    out = console()
    verb = "would remove" if dry_run else "removed"
    if removed:
        columns = [Col("run"), Col("status"), Col("ended", "right", drop=2),
                   Col("size", "right", drop=3), Col("backend", drop=4)]
        out.print(fitted_table(out, columns, [
            [f"{verb} [bold]{row['run_id']}[/]", styled(row["status"]),
             f"{human_duration(_age(row, now))} ago", size_text(row["bytes"]),
             row["backend"]] for row in removed],
            box=None, show_header=False, pad_edge=False, padding=(0, 1)))
    total = size_text(sum(row["bytes"] for row in removed))
    count = len(removed)
    if count:
        out.print(f"{verb} {count} run{'s' * (count != 1)} ({total} on disk)")
    else:
        out.print("no run matched: nothing to remove")
    for row in running:
        out.print(f"kept {row['run_id']}: it is running (finish or interrupt it first)")
    for error in errors:
        click.echo(f"prose clean: could not remove {error['run_id']}: {error['error']}",
                   err=True)


def _age(row: dict, now: datetime) -> float | None:
    return None if row["ended"] is None else (now - row["ended"]).total_seconds()


def _stamp(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")
