"""The server follows the program beside an embodied host (issue 22), checked as a property
of corpus programs: a scripted host walking a program correctly is accepted and leaves the
run ``prose run`` leaves; the same walk with one deviation — a statement skipped, a verdict
left out, the branch the verdict did not choose, a statement started twice, one loop round
too many, a changed prompt — is refused at that step, naming what the program expects
there (see :mod:`tests.mcp_server.deviate`). The suite walks the corpus programs that between
them have everything any corpus program but those in ``SKIPPED`` has (:func:`features`: each
statement kind in each construct, each syntax node in each other, each property), about half
of them; ``bench/follow.py`` walks every one, one per process, and prints each program's
steps, deviations and seconds."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.mcp_server.deviate import check_program
from tests.mcp_server.host import CORPUS, corpus
from tests.mcp_server.test_host_walk import FAILING
from tests.mcp_server.test_host_walk import SCRIPT as ANSWERS

from openprose.language import compile_or_raise
from openprose.language import nodes as n
from openprose.language.analysis import analyze

SCRIPT = dict(ANSWERS, sessions=FAILING + ANSWERS["sessions"])
#: Programs the scripted walker cannot step, with the reason (bench/follow.py skips them).
SKIPPED: dict[str, str] = {
    "19-advanced-parallel.prose": "first/any joins: which branches win depends on timing, so "
                                  "a one-at-a-time walk and prose run differ by design",
    "28-gas-town.prose": "19,002 sessions (prose run alone takes 20 s): too long to walk "
                         "through the tools here",
}
#: Deviations some programs must show, between them: sequences, if/elif/else, choice, judged
#: and counted loops, for, parallel, blocks (recursive too), try/catch/finally with failing
#: sessions, persistent agents.
KINDS = {
    "25-conditionals.prose": {"statement started twice", "verdict missing",
                              "other branch taken", "statement skipped", "changed prompt",
                              "loop round too many"},
    "24-choice-blocks.prose": {"verdict missing", "other branch taken", "changed prompt"},
    "22-error-handling.prose": {"changed prompt", "statement started twice"},
    "14-composition-blocks.prose": {"changed prompt"},
    "20-fixed-loops.prose": {"changed prompt", "loop round too many"},
    "16-parallel-reviews.prose": {"changed prompt"},
    "40-rlm-self-refine.prose": {"changed prompt", "verdict missing"},
    "29-captains-chair.prose": {"changed prompt"},  # context a finished block call left
}


#: Programs walked whatever their features, with the reason (beside those of ``KINDS``).
ALWAYS = {"48-habit-miner.prose": "its run fails (a `resume:` before any memory): the walk "
                                  "must fail as prose run's does"}


def features(source: str, name: str) -> set[tuple[str, ...]]:
    """What walking the program exercises: each statement kind in the construct around it
    (judged or not, in a block or not, how it binds), each syntax node in the one around it,
    each property by name."""
    program = compile_or_raise(source, name)
    found: set[tuple[str, ...]] = set()
    for statement in (outline := analyze(program, source)).statements.values():
        around = outline.statements.get(statement.parent or "")
        found.add((around.kind if around else "top", statement.kind, str(statement.judged),
                   str(statement.block is not None), str(statement.binding_kind)))

    def visit(node: n.Node, parent: str) -> None:
        kind = type(node).__name__
        if isinstance(node, n.Property):
            kind += ":" + node.name
        found.add((parent, kind))
        for child in node.children():
            visit(child, kind)

    visit(program, "")
    return found


def representatives(names: list[str]) -> list[str]:
    """Programs that between them have every feature any of ``names`` has: those ``KINDS``
    and ``ALWAYS`` name, then each time the one adding the most features per line."""
    have = {name: features(corpus(name), name) for name in names}
    size = {name: len(corpus(name).splitlines()) for name in names}
    chosen = [name for name in names if name in KINDS or name in ALWAYS]
    covered = set().union(*(have[name] for name in chosen))
    while missing := set().union(*have.values()) - covered:
        best = max((name for name in names if have[name] & missing),
                   key=lambda name: (len(have[name] & missing) / size[name], name))
        chosen.append(best)
        covered |= have[best]
    return sorted(chosen)


ALL = sorted(p.name for p in CORPUS.glob("*.prose") if p.name not in SKIPPED)
PROGRAMS = representatives(ALL) if ALL else []


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_walk_is_accepted_and_each_deviation_refused_where_it_is_made(
        name: str, tmp_path: Path) -> None:
    checked = check_program(tmp_path, name, corpus(name), SCRIPT)
    assert checked.deviations
    assert KINDS.get(name, set()) <= {d.kind for d in checked.deviations}
