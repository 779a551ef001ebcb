"""What the inspecting commands share: options, an 80-column console that colours only a
terminal, and finding a project's runs on whichever backends hold them."""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console

BACKENDS = ["filesystem", "sqlite", "postgres"]
WIDTH = 80
STATUS_STYLE = {"running": "cyan", "completed": "green", "failed": "red bold",
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


#: Characters never written to a terminal as they are: C0 and C1 controls but newline and tab,
#: DEL, and the bidirectional and zero-width format characters.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e"
                      "\u2066-\u2069\ufeff]")


def console(stderr: bool = False) -> Console:
    """At most 80 columns; colour and styles only when writing to a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    width = min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns) if tty else WIDTH
    return Console(file=stream, width=width, force_terminal=tty, no_color=not tty,
                   highlight=False, emoji=False, soft_wrap=False)


def plain(text: str) -> str:
    """``text`` of a run (a value, a statement, an error a program or a model wrote) fit for
    the terminal: control characters but newline and tab written as ``\\xNN`` or ``\\uNNNN``
    (an escape sequence in a value could set the window title, write the clipboard with OSC
    52, or hide and redraw what is shown; a bidi override could reorder it), and rich markup
    escaped."""
    from rich.markup import escape

    return escape(printable(text))


def printable(text: str) -> str:
    """``text`` with its control and format characters (but newline and tab) written out."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 256
                        else f"\\u{ord(m[0]):04x}", text)


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
