"""The server follows the program beside an embodied host (issue 22), checked as a property
of corpus programs: a scripted host walking a program correctly is accepted and leaves the
run ``prose run`` leaves; the same walk with one deviation — a statement skipped, a verdict
left out, the branch the verdict did not choose, a statement started twice, one loop round
too many, a changed prompt — is refused at that step, naming what the program expects
there (see :mod:`tests.mcp_server.deviate`). Every corpus program but those in ``SKIPPED``
is walked (about 40 s on two busy cores); ``bench/follow.py`` walks them one per process and
prints each program's steps, deviations and seconds."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.mcp_server.deviate import check_program
from tests.mcp_server.host import CORPUS, corpus
from tests.mcp_server.test_host_walk import FAILING
from tests.mcp_server.test_host_walk import SCRIPT as ANSWERS

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


PROGRAMS = sorted(p.name for p in CORPUS.glob("*.prose") if p.name not in SKIPPED)


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_walk_is_accepted_and_each_deviation_refused_where_it_is_made(
        name: str, tmp_path: Path) -> None:
    checked = check_program(tmp_path, name, corpus(name), SCRIPT)
    assert checked.deviations
    assert KINDS.get(name, set()) <= {d.kind for d in checked.deviations}
