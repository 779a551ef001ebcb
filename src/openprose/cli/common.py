"""What the inspecting commands share: options, a console as wide as the terminal that colours
only a terminal, tables fitted to it, and finding a project's runs on whichever backends hold
them."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click
from rich.console import Console, JustifyMethod

from openprose.state import BACKENDS
from openprose.terminal import printable

if TYPE_CHECKING:
    from rich.table import Table

#: The width of output that is not a terminal's (piped, redirected).
WIDTH = 80
#: What every ``prose`` command's exit status means (docs/reference/exit-codes.md is generated
#: from this table, and a test checks that each status a command exits with is in it).
EXIT_CODES: dict[int, str] = {
    0: "success: the run completed, the program compiled, the check passed",
    1: "failure: the run failed, the program has errors, a check failed, or the command "
       "could not do what was asked",
    2: "usage: a bad option or argument, something named that does not exist (a run, "
       "binding, example or help topic), a program that does not compile before a run, a "
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
    """The terminal's width (80 columns when not a terminal); colour and styles only when
    writing to a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    width = shutil.get_terminal_size((WIDTH, 24)).columns if tty else WIDTH
    return Console(file=stream, width=width, force_terminal=tty, no_color=not tty,
                   highlight=False, emoji=False, soft_wrap=False)


@dataclass(frozen=True, slots=True)
class Col:
    """A column of :func:`fitted_table`. ``drop``: 0 never dropped (ids, line numbers,
    statuses), else the higher the sooner it goes when the table does not fit. ``least``:
    an elastic column (free text) that may be cut with an ellipsis down to this width; 0 is
    never cut."""

    header: str
    justify: JustifyMethod = "left"
    drop: int = 0
    least: int = 0


def fitted_table(out: Console, columns: list[Col], rows: list[list[str]],
                 **options: Any) -> Table:
    """A table of ``rows`` (rich markup) within ``out``'s width: every column at its full
    width when they fit; otherwise low-value columns are left out whole (highest ``drop``
    first) until the rest fit with the elastic ones cut to what is left. Cells of the
    other columns are never cut."""
    from rich.table import Table
    from rich.text import Text

    widths = [max([Text.from_markup(c.header).cell_len,
                   *(Text.from_markup(row[i]).cell_len for row in rows)])
              for i, c in enumerate(columns)]
    keep = list(range(len(columns)))

    def build(chosen: list[int], sizes: dict[int, int]) -> Table:
        table = Table(**options)
        for i in chosen:
            col = columns[i]
            table.add_column(col.header, justify=col.justify, no_wrap=True, width=sizes[i],
                             overflow="ellipsis" if col.least else "fold")
        return table

    def frame(chosen: list[int]) -> int:  # the columns' separators and padding
        return build(chosen, dict.fromkeys(chosen, 1)).__rich_measure__(
            out, out.options).maximum - len(chosen)

    while True:
        least = sum(min(widths[i], columns[i].least or widths[i]) for i in keep)
        droppable = [i for i in keep if columns[i].drop]
        if least + frame(keep) <= out.width or not droppable:
            break
        keep.remove(max(droppable, key=lambda i: (columns[i].drop, i)))
    sizes = {i: widths[i] if not columns[i].least else min(widths[i], columns[i].least)
             for i in keep}
    spare = out.width - frame(keep) - sum(sizes.values())
    wanting = [i for i in keep if sizes[i] < widths[i]]
    while spare > 0 and wanting:  # the elastic columns share what is left evenly
        share = max(1, spare // len(wanting))
        for i in wanting:
            grant = min(share, widths[i] - sizes[i], spare)
            sizes[i] += grant
            spare -= grant
        wanting = [i for i in wanting if sizes[i] < widths[i]]
    table = build(keep, sizes)
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    return table


def plain(text: str) -> str:
    """``text`` of a run fit for a rich console: control characters written out
    (:func:`openprose.terminal.printable`) and rich markup escaped."""
    from rich.markup import escape

    return escape(printable(text))


def size_text(size: int | None, spaced: bool = True) -> str:
    """A size in bytes for people (1024 to the kB); ``spaced=False`` for narrow table
    cells (``1.5k``)."""
    if size is None:
        return "?"
    gap = " " if spaced else ""
    for unit, short in (("B", "B"), ("kB", "k"), ("MB", "M")):
        if size < 1024 or unit == "MB":
            text = f"{size:.0f}" if unit == "B" else f"{size:.1f}"
            return f"{text}{gap}{unit if spaced else short}"
        size /= 1024
    raise AssertionError


def styled(status: str) -> str:
    style = STATUS_STYLE.get(status)
    return f"[{style}]{status}[/]" if style else status


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=1, default=str))


#: Exit status of a usage error: a bad argument, or a run, binding or example not found (as
#: for ``prose run`` and ``prose resume``); 1 is left for what failed.
USAGE = 2


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
    unread = False  # a store that could not be listed: "not found" is then not known
    for store in opened:
        try:
            every += [(store, info) for info in store.list_runs()]
        except StateError as err:
            click.echo(f"prose {command}: cannot list {store.kind} runs: {err}", err=True)
            unread = True
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
                      "`prose runs` lists them", 1 if unread else USAGE)
    ids = ", ".join(sorted(info.id for _, info in matches)[:5])
    fail(command, f"{run_id!r} matches several runs ({ids}); give more of the id", USAGE)
