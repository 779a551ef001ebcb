"""What a judgment sees: its statement in the program, and what the run has produced.

A careful VM judges a ``**condition**`` with everything in front of it. The engine hands the
provider the program lines around the statement (the condition's line marked) and the
bindings visible in scope, most recently written first, within a budget: a value whole when
it is small, otherwise a preview plus where to read the rest (``JudgeRequest.read`` gives the
whole value by name, as a session's capability does). In loops the latest iteration's result
comes first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import islice

from openprose.engine.provider import VERBATIM_LIMIT, ContextItem

LINES_BEFORE = 8  # program lines shown above the statement
LINES_MAX = 40  # program lines shown at most
LINE_WIDTH = 200  # characters shown of one program line
BUDGET = 12_000  # characters of binding values per judgment
MAX_ITEMS = 40  # bindings listed at most (the most recent ones)
PREVIEW = 600  # characters shown of a value too long to show whole
LATEST = "latest iteration"


@dataclass(frozen=True, slots=True)
class Seen:
    """One binding a judgment can see."""

    name: str
    kind: str
    text: str
    location: str


def program_excerpt(lines: list[str], first: int, last: int, focus: int) -> str:
    """Lines ``first - LINES_BEFORE`` … ``last`` (at most ``LINES_MAX``), numbered, with
    ``>`` on line ``focus``."""
    start = max(1, min(first, focus) - LINES_BEFORE)
    end = min(len(lines), max(last, focus), start + LINES_MAX - 1)
    width = len(str(end))
    return "\n".join(f"{'>' if no == focus else ' '} {no:>{width}} | {_cut(lines[no - 1])}"
                     for no in range(start, end + 1))


def _cut(line: str) -> str:
    return line if len(line) <= LINE_WIDTH else line[:LINE_WIDTH] + " …"


def context_items(seen: Iterable[Seen], budget: int = BUDGET
                  ) -> tuple[tuple[ContextItem, ...], Callable[[str], str] | None]:
    """Context items within ``budget`` characters, in the order given (the first
    ``MAX_ITEMS``), and a reader of the whole values (``None`` when all are shown whole)."""
    items: list[ContextItem] = []
    whole: dict[str, str] = {}
    left = budget
    cut = False
    for entry in islice(seen, MAX_ITEMS):
        whole[entry.name] = entry.text
        size = len(entry.text)
        if size <= min(VERBATIM_LIMIT, left):
            text = entry.text
        elif left >= 200:
            shown = min(PREVIEW, left - 150)
            text = (f"{entry.text[:shown]}\n[... {size - shown} more characters: read the "
                    f"whole value with read_binding(\"{entry.name}\") or at {entry.location}]")
            cut = True
        else:
            text = f"[not shown, {size} characters: read_binding(\"{entry.name}\") or at " \
                   f"{entry.location}]"
            cut = True
        left = max(0, left - len(text))
        items.append(ContextItem(entry.name, text, entry.location, entry.kind))
    if not cut:
        return tuple(items), None

    def read(name: str) -> str:
        if name not in whole:
            raise KeyError(f"'{name}' is not in this judgment's context "
                           f"({', '.join(whole)})")
        return whole[name]

    return tuple(items), read


def describe(items: tuple[ContextItem, ...], program: str) -> str:
    """The context as text, for providers that take one message."""
    parts = []
    if program:
        parts.append(f"The statement in its program ('>' marks the line):\n{program}")
    if items:
        shown = "\n\n".join(f"## {item.name}" + (f" ({item.kind})" if item.kind else "")
                            + f"\n{item.text}" for item in items)
        parts.append(f"What the run has produced, most recent first:\n{shown}")
    return "\n\n".join(parts)
