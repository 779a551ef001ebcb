"""What a judgment sees: its statement in the program, and what the run has produced.

A careful VM judges a ``**condition**`` with everything in front of it. The engine hands the
provider the program lines around the statement (the condition's line marked) and the
bindings visible in scope, most recently written first, within a budget: a value whole when
it is small, otherwise a preview plus where to read the rest (``JudgeRequest.read`` gives the
whole value by name, as a session's capability does). In loops the latest iteration's result
comes first.

A judge that reads bindings itself (a host model with ``read_binding``, whose context grows
with every turn) gets :data:`REFERENCES` instead: names, kinds, sizes and short previews
within about 1.5 KB for the whole judgment, whatever the values' sizes; it reads what it
needs.
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
class Budget:
    """How much of the program and of the run a judgment is shown."""

    values: int = BUDGET  # characters of values (or previews) in all
    lines_before: int = LINES_BEFORE
    lines: int = LINES_MAX
    width: int = LINE_WIDTH
    preview: int = PREVIEW  # characters of a value too long to show whole
    by_reference: bool = False  # previews only, however small the value


#: For the engine's own providers (one message per judgment, no growing context).
WHOLE = Budget()
#: For a judge that reads bindings itself: a few program lines, names, sizes, previews.
REFERENCES = Budget(values=500, lines_before=2, lines=6, width=100, preview=60,
                    by_reference=True)


@dataclass(frozen=True, slots=True)
class Seen:
    """One binding a judgment can see."""

    name: str
    kind: str
    text: str
    location: str


def program_excerpt(lines: list[str], first: int, last: int, focus: int,
                    budget: Budget = WHOLE) -> str:
    """Lines ``first - lines_before`` … ``last`` (at most ``budget.lines``), numbered, with
    ``>`` on line ``focus``."""
    start = max(1, min(first, focus) - budget.lines_before)
    end = min(len(lines), max(last, focus), start + budget.lines - 1)
    width = len(str(end))
    return "\n".join(f"{'>' if no == focus else ' '} {no:>{width}} | "
                     f"{_cut(lines[no - 1], budget.width)}" for no in range(start, end + 1))


def _cut(line: str, width: int) -> str:
    return line if len(line) <= width else line[:width] + " …"


def context_items(seen: Iterable[Seen], budget: Budget = WHOLE
                  ) -> tuple[tuple[ContextItem, ...], Callable[[str], str] | None]:
    """Context items within the budget, in the order given (the first ``MAX_ITEMS``), and a
    reader of the whole values (``None`` when all are shown whole)."""
    if budget.by_reference:
        return references(seen, budget)
    items: list[ContextItem] = []
    whole: dict[str, str] = {}
    left = budget.values
    cut = False
    for entry in islice(seen, MAX_ITEMS):
        whole[entry.name] = entry.text
        size = len(entry.text)
        if size <= min(VERBATIM_LIMIT, left):
            text = entry.text
        elif left >= 200:
            shown = min(budget.preview, left - 150)
            text = (f"{entry.text[:shown]}\n[... {size - shown} more characters: read the "
                    f"whole value with read_binding(\"{entry.name}\") or at {entry.location}]")
            cut = True
        else:
            text = f"[not shown, {size} characters: read_binding(\"{entry.name}\") or at " \
                   f"{entry.location}]"
            cut = True
        left = max(0, left - len(text))
        items.append(ContextItem(entry.name, text, entry.location, entry.kind))
    return tuple(items), (_reader(whole) if cut else None)


def references(seen: Iterable[Seen], budget: Budget = REFERENCES
               ) -> tuple[tuple[ContextItem, ...], Callable[[str], str]]:
    """Every binding by name, kind and size (``ContextItem.size``), the first ones with a
    one-line preview of ``budget.preview`` characters while ``budget.values`` lasts; then
    names only, until they too would exceed it. The reader gives any listed value whole."""
    items: list[ContextItem] = []
    whole: dict[str, str] = {}
    left = budget.values
    for entry in islice(seen, MAX_ITEMS):
        cost = len(entry.name) + len(entry.kind) + 8  # name, kind and size, roughly
        if cost > left:
            break
        preview = " ".join(entry.text[:budget.preview * 2].split())[:budget.preview]
        if len(preview) < len(entry.text) and preview:
            preview += " …"
        shown = preview if cost + len(preview) <= left and left > budget.values // 3 else ""
        left -= cost + len(shown)
        whole[entry.name] = entry.text
        items.append(ContextItem(entry.name, shown, entry.location, entry.kind,
                                 len(entry.text)))
    return tuple(items), _reader(whole)


def _reader(whole: dict[str, str]) -> Callable[[str], str]:
    def read(name: str) -> str:
        if name not in whole:
            raise KeyError(f"'{name}' is not in this judgment's context "
                           f"({', '.join(whole)})")
        return whole[name]

    return read


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
