"""A short kill/resume sweep in the suite (bench/faults.py runs the long one): one program with
reassignment, first/any/fail-fast joins and recursion, SIGKILLed at random moments and
resumed on every backend, ends exactly as an uninterrupted run and never re-runs a finished
session."""

from __future__ import annotations

from tests.engine import kill_sweep


def test_killed_and_resumed_runs_end_as_uninterrupted_ones(tmp_path, backend):
    # each drive but the last waits in the final session until its kill comes: all three
    # kills land, whatever the machine's speed
    tally = kill_sweep.sweep([kill_sweep.combined_program()], [backend], trials=1,
                             workdir=tmp_path, max_kills=3, reach=0.5, hold_last=True)
    assert tally.kills == 3
    assert tally.notes == [] and tally.mismatches == 0
    assert tally.reran == 0
