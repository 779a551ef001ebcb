"""``prose update``: migrate an older ``.prose/`` workspace to today's layout."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import click

from openprose.cli.common import console, emit_json, fail, json_option, plain, project_option
from openprose.terminal import printable


@click.command("update")
@click.option("--dry-run", is_flag=True, help="Say what would change; change nothing.")
@json_option
@project_option
def update_command(dry_run: bool, as_json: bool, project: Path) -> None:
    """Migrate an older workspace: runs to .prose/runs/, settings to .prose/.env.

    .prose/execution/ is moved into .prose/runs/ (a run whose name is taken gets a -legacy
    suffix; nothing is overwritten), .prose/agents/ is created, and a stale
    .prose/state.json has its settings copied into .prose/.env (keys already there win)
    and is removed. Running it again changes nothing.
    """
    from openprose.state.workspace import update_workspace

    root = project.resolve()
    if not root.is_dir():
        fail("update", f"--project {project}: no such directory")
    try:
        report = update_workspace(root, dry_run=dry_run)
    except OSError as err:
        fail("update", f"stopped: {err.strerror or err} ({err.filename or root}); what was "
                       "done so far is kept, run prose update again once that is fixed")
    if as_json:
        emit_json({"project": str(root), "dry_run": dry_run,
                   "changes": [asdict(change) for change in report.changes],
                   "problems": report.problems})
    else:
        out = console()
        if not (root / ".prose").is_dir():
            out.print("nothing to update: no .prose/ in this project")
        elif not report.changes and not report.problems:
            out.print("nothing to update: .prose/ is current")
        for change in report.changes:
            out.print(plain(change.describe(dry_run=dry_run)), overflow="fold")
        for problem in report.problems:
            click.echo(f"prose update: {printable(problem)}", err=True)
    if report.problems:
        raise SystemExit(1)
