"""``prose export``: copy a run between state backends."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from openprose.state import BACKENDS


def _detect(root: Path, run_id: str) -> str:
    run_dir = root / ".prose" / "runs" / run_id
    if (run_dir / "run.json").is_file():
        return "filesystem"
    if (run_dir / "state.db").is_file():
        return "sqlite"
    return "postgres"


@click.command("export")
@click.argument("run_id")
@click.option("--to", "target", type=click.Choice(BACKENDS), required=True,
              help="Backend to copy the run into.")
@click.option("--from", "origin", type=click.Choice(BACKENDS), default=None,
              help="Backend holding the run (detected when omitted).")
@click.option("--project", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Project directory (the one holding .prose/).")
def export_command(run_id: str, target: str, origin: str | None, project: Path) -> None:
    """Copy run RUN_ID (with its imports) to another state backend, losslessly."""
    from openprose.state import StateError, open_store
    from openprose.state.export import export_run
    from openprose.state.names import check_run_id

    try:
        check_run_id(run_id)
        origin = origin or _detect(project, run_id)
        if origin == target:
            raise click.UsageError(f"run {run_id} is already on {target}")
        with open_store(project, origin) as source, open_store(project, target) as destination:
            copied = export_run(source, run_id, destination)
    except StateError as err:
        click.echo(f"prose export: {err}", err=True)
        sys.exit(1)
    click.echo(f"exported {len(copied)} run(s) from {origin} to {target}: {run_id}")
