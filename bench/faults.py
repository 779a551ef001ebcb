"""Kill/resume sweep (issue 9): real `prose` processes SIGKILLed at random moments, resumed until
they finish, compared with an uninterrupted run.

    python bench/faults.py [--backends filesystem,sqlite,postgres] [--trials 3]
                           [--corpus-trials 1] [--max-kills 3] [--seed faults]

Programs: every corpus program (../shared/corpus, roadmap included; skipped when absent) and
five of our own (reassignment, parallel "first", "any" with count, fail-fast inside a try,
recursion), each on every backend in turn. Per program and backend: one uninterrupted run,
then the trials, each killed up to --max-kills times at a moment drawn uniformly from the
reference run's duration after the process opened its run (so a kill may also land after it
ended: no kill then), resumed after each kill. Prints per backend and in total: trials, kills, mismatches (status, error,
outputs or named bindings differ from the uninterrupted run's), and sessions re-run (started
again after their result was committed; must be 0). PostgreSQL runs when
OPENPROSE_POSTGRES_URL (or OPENPROSE_TEST_POSTGRES_URL) is set, in a throwaway schema.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.engine import kill_sweep as sweep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="filesystem,sqlite,postgres")
    parser.add_argument("--trials", type=int, default=3, help="per own program and backend")
    parser.add_argument("--corpus-trials", type=int, default=1,
                        help="per corpus program and backend")
    parser.add_argument("--max-kills", type=int, default=3, help="per trial")
    parser.add_argument("--seed", default="faults")
    args = parser.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    if "postgres" in backends and not sweep.PG_URL:
        print("postgres: skipped (set OPENPROSE_POSTGRES_URL or OPENPROSE_TEST_POSTGRES_URL)")
        backends.remove("postgres")
    corpus = sweep.corpus_programs() if sweep.CORPUS.is_dir() else []
    print(f"{len(corpus)} corpus programs, {len(sweep.OWN)} own; backends: "
          f"{', '.join(backends)}", flush=True)
    began = time.monotonic()
    total = sweep.Tally()

    def report(backend: str, program: str, tally: sweep.Tally) -> None:
        flag = "  MISMATCH" if tally.mismatches else ""
        rerun = f"  RE-RUN {tally.reran}" if tally.reran else ""
        print(f"  {backend:<10} {program:<36} trials {tally.trials:>2}  kills "
              f"{tally.kills:>2}{flag}{rerun}", flush=True)
        for note in tally.notes:
            print(f"    {note}", flush=True)

    per_backend = {backend: sweep.Tally() for backend in backends}
    work_list = [(p, args.trials) for p in sweep.own_programs()] + \
        [(p, args.corpus_trials) for p in corpus]
    with tempfile.TemporaryDirectory(prefix="prose-faults-") as work:
        for program, trials in work_list:  # every backend per program: a cut-short run
            for backend in backends:       # still covers all of them
                per_backend[backend].add(sweep.sweep(
                    [program], [backend], trials, Path(work), seed=args.seed,
                    max_kills=args.max_kills, report=report))
    for backend, tally in per_backend.items():
        print(f"{backend}: trials {tally.trials}, kills {tally.kills}, mismatches "
              f"{tally.mismatches}, sessions re-run {tally.reran}")
        total.add(tally)
    print(f"total: trials {total.trials}, kills {total.kills}, mismatches {total.mismatches}, "
          f"sessions re-run {total.reran} ({time.monotonic() - began:.0f} s)")


if __name__ == "__main__":
    main()
