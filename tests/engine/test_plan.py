"""``--dry-run`` plans: upper bounds per construct, data-dependent counts flagged."""

from __future__ import annotations

from openprose.engine.plan import plan
from openprose.language import compile_or_raise


def _plan(source):
    return plan(compile_or_raise(source, "p.prose"), loop_limit=50)


def test_counts_loops_branches_and_collections():
    p = _plan('let xs = ["a", "b", "c"]\n'
              'for x in xs:\n  session "per item"\n'
              'loop until **done** (max: 4):\n  session "work"\n'
              'if **ok**:\n  session "yes"\nelse:\n  session "no"\n'
              'parallel:\n  a = session "A"\n  b = session "B"\n')
    times = {s.text: s.times for s in p.steps}
    assert times == {"per item": 3, "done": 4, "work": 4, "ok": 1, "yes": 1, "no": 1,
                     "A": 1, "B": 1}
    assert (p.sessions, p.judgments, p.data_dependent) == (11, 5, False)


def test_data_dependent_and_recursion_are_flagged():
    p = _plan('let items = session "list things"\nfor x in items:\n  session "each"\n'
              'block f(n):\n  session "in f"\n  do f(n)\n\ndo f(1)\nloop:\n  session "forever"\n')
    times = {s.text: s.times for s in p.steps}
    assert times["each"] is None and times["recursive do f"] is None
    assert times["forever"] == 50 and p.data_dependent
