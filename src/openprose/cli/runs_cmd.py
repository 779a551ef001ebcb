"""``prose runs``: the project's runs, newest first, on every backend it uses."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from openprose.cli.common import (
    Col,
    console,
    emit_json,
    fitted_table,
    json_option,
    plain,
    project_option,
    state_option,
    stores,
    styled,
)


def parse_time(stamp: str) -> datetime | None:
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except (TypeError, ValueError):
        return None


def duration(started: str, updated: str, running: bool) -> float | None:
    """Seconds from start to the last update (to now while it runs)."""
    start = parse_time(started)
    end = datetime.now(UTC) if running else parse_time(updated)
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())


def run_time(started: str, updated: str, running: bool) -> str:
    """How long a run took (or has run), as shown: its stamps are whole seconds, so a run
    shorter than one reads ``<1s``."""
    seconds = duration(started, updated, running)
    return "<1s" if seconds is not None and seconds < 1 else human_duration(seconds)


def human_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def run_rows(opened: list[Any]) -> list[dict[str, Any]]:
    from openprose.state import StateError
    from openprose.state.view import run_journal, usage_of

    rows = []
    for store in opened:
        try:
            records = store.run_records()
        except StateError as err:
            click.echo(f"prose runs: cannot list {store.kind} runs: {err}", err=True)
            continue
        for record in records:
            try:
                usage = usage_of(run_journal(store, record.id))
            except StateError:
                usage = None
            running = record.status == "running"
            rows.append({
                "run_id": record.id, "program": record.program_path, "status": record.status,
                "backend": store.kind, "started": record.started, "updated": record.updated,
                "duration_s": duration(record.started, record.updated, running),
                "sessions": usage.sessions if usage else None,
                "tokens": (usage.input_tokens + usage.output_tokens) if usage else None,
                "cost_usd": round(usage.cost_usd, 6) if usage else None,
                "error": record.error,
            })
    rows.sort(key=lambda row: (row["started"], row["run_id"]), reverse=True)
    return rows


@click.command("runs")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True,
              help="Show at most this many runs.")
@state_option
@json_option
@project_option
def runs_command(limit: int, backend: str | None, as_json: bool, project: Path) -> None:
    """List the project's runs, newest first: status, start, duration, sessions, tokens."""
    from rich import box

    with stores(project, backend, "runs") as opened:
        rows = run_rows(opened)[:limit]
    if as_json:
        emit_json({"runs": rows})
        return
    out = console()
    if not rows:
        out.print("no runs yet (start one with `prose run FILE`)")
        return
    columns = [Col("run"), Col("program", drop=3, least=8), Col("status"),
               Col("started", drop=6), Col("time", "right", drop=2),
               Col("sess", "right", drop=5), Col("tokens", "right", drop=4)]
    cells = [[row["run_id"], plain(Path(row["program"] or "(inline)").name),
              styled(row["status"]), (row["started"] or "")[5:16].replace("T", " "),
              run_time(row["started"], row["updated"], row["status"] == "running"),
              "?" if row["sessions"] is None else str(row["sessions"]),
              "?" if row["tokens"] is None else _count(row["tokens"])] for row in rows]
    out.print(fitted_table(out, columns, cells, box=box.SIMPLE_HEAD, pad_edge=False,
                           show_edge=False, padding=(0, 1), collapse_padding=True))


def _count(number: int) -> str:
    if number >= 10_000_000:
        return f"{number / 1_000_000:.0f}M"
    if number >= 100_000:
        return f"{number / 1000:.0f}k"
    return f"{number:,}"
