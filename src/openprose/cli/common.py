"""What the inspecting commands share: options, an 80-column console that colours only a
terminal, and finding a project's runs on whichever backends hold them."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console

from openprose.state import BACKENDS
from openprose.terminal import printable

WIDTH = 80
#: What every ``prose`` command's exit status means (docs/reference/exit-codes.md is generated
#: from this table, and a test checks that each status a command exits with is in it).
EXIT_CODES: dict[int, str] = {
    0: "success: the run completed, the program compiled, the check passed",
    1: "failure: the run failed, the program has errors, a check failed, or the command "
       "could not do what was asked (a run or example that does not exist)",
    2: "usage: a bad option or argument, a program that does not compile before a run, a "
       "setting or port that cannot be used",
    3: "paused: the run reached an `input` nobody could answer; resume it with the value",
    4: "budget: the run reached `--max-tokens` or `--max-cost` and stopped, resumable",
    130: "interrupted: Ctrl-C or SIGTERM; the run is left resumable (`prose serve`: stopped "
         "by Ctrl-C)",
    143: "`prose serve` stopped by SIGTERM (128 + the signal's number)",
}
STATUS_STYLE = {"queued": "blue", "running": "cyan", "completed": "green", "failed": "red bold",
                "interrupted": "yellow", "complete": "green", "executing": "cyan",
                "cancelled": "yellow", "judged": "magenta"}


def project_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--project", type=click.Path(file_okay=False, path_type=Path),
                        default=Path("."), show_default=True,
                        help="Project root holding .prose/.")(fn)


def state_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--state", "backend", type=click.Choice(BACKENDS), default=None,
                        help="Only this state backend (default: every one configured).")(fn)


def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True,
                        help="Print JSON instead of text.")(fn)


def console(stderr: bool = False) -> Console:
    """At most 80 columns; colour and styles only when writing to a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    width = min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns) if tty else WIDTH
    return Console(file=stream, width=width, force_terminal=tty, no_color=not tty,
                   highlight=False, emoji=False, soft_wrap=False)


def plain(text: str) -> str:
    """``text`` of a run fit for a rich console: control characters written out
    (:func:`openprose.terminal.printable`) and rich markup escaped."""
    from rich.markup import escape

    return escape(printable(text))


def styled(status: str) -> str:
    style = STATUS_STYLE.get(status)
    return f"[{style}]{status}[/]" if style else status


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=1, default=str))


def fail(command: str, message: str, code: int = 1) -> NoReturn:
    click.echo(f"prose {command}: {message}", err=True)
    sys.exit(code)


def backends_for(project: Path, backend: str | None) -> list[str]:
    """The backends to look in: the one asked for, else those this project can use."""
    if backend is not None:
        return [backend]
    from openprose.state import postgres_url

    names = ["filesystem", "sqlite"]
    return [*names, "postgres"] if postgres_url(project.resolve()) else names


@contextmanager
def stores(project: Path, backend: str | None, command: str) -> Iterator[list[Any]]:
    """Open the project's stores; one that cannot be reached is reported (on stderr) and
    skipped, unless it was asked for by name."""
    from openprose.state import StateError, open_store

    opened = []
    try:
        for name in backends_for(project, backend):
            try:
                opened.append(open_store(project, name))
            except StateError as err:
                if backend is not None:
                    fail(command, str(err))
                click.echo(f"prose {command}: skipping {name}: {err}", err=True)
        yield opened
    finally:
        for store in opened:
            store.close()


def find_run(opened: list[Any], run_id: str, command: str) -> tuple[Any, str]:
    """The store holding ``run_id`` — an exact id, a unique prefix, or ``latest``."""
    from openprose.state import StateError

    every: list[tuple[Any, Any]] = []
    for store in opened:
        try:
            every += [(store, info) for info in store.list_runs()]
        except StateError as err:
            click.echo(f"prose {command}: cannot list {store.kind} runs: {err}", err=True)
    if run_id == "latest" and every:
        store, info = max(every, key=lambda pair: (pair[1].started, pair[1].id))
        return store, info.id
    exact = [(s, i) for s, i in every if i.id == run_id]
    matches = exact or [(s, i) for s, i in every if i.id.startswith(run_id)]
    if len(matches) == 1:
        return matches[0][0], matches[0][1].id
    where = ", ".join(store.kind for store in opened) or "no backend"
    if not matches:
        fail(command, f"no run {run_id!r} in this project (looked in: {where}); "
                      "`prose runs` lists them")
    ids = ", ".join(sorted(info.id for _, info in matches)[:5])
    fail(command, f"{run_id!r} matches several runs ({ids}); give more of the id")
