"""Kill/resume sweep (issue 9): real `prose` processes SIGKILLed at random moments, resumed until
they finish, compared with an uninterrupted run.

    python bench/faults.py [--backends filesystem,sqlite,postgres] [--trials 3]
                           [--corpus-trials 1] [--max-kills 3] [--seed faults]
                           [--programs NAME,...] [--limit 300]

Programs: every corpus program (../shared/corpus, roadmap included; skipped when absent) and
five of our own (reassignment, parallel "first", "any" with count, fail-fast inside a try,
recursion), each on every backend in turn. Per program and backend: one uninterrupted run,
then the trials, each killed up to --max-kills times at a moment drawn uniformly from the
reference run's duration after the process opened its run (so a kill may also land after it
ended: no kill then), resumed after each kill. A trial mismatches when its status, error,
outputs or named bindings differ from the uninterrupted run's, or a process printed a
traceback or did not end. A program is skipped, with its reason counted, when it does not
compile, its uninterrupted run gives no result here, or takes longer than --limit seconds.
Ends with a table per backend and in total: programs, trials, kills, mismatches, sessions
re-run (started again after their result was committed; must be 0) and skipped. PostgreSQL
runs when OPENPROSE_POSTGRES_URL (or OPENPROSE_TEST_POSTGRES_URL) is set, in a throwaway
schema.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.engine import kill_sweep as sweep

COLUMNS = ("programs", "trials", "kills", "mismatches", "re-run", "skipped")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="filesystem,sqlite,postgres")
    parser.add_argument("--trials", type=int, default=3, help="per own program and backend")
    parser.add_argument("--corpus-trials", type=int, default=1,
                        help="per corpus program and backend")
    parser.add_argument("--max-kills", type=int, default=3, help="per trial")
    parser.add_argument("--seed", default="faults")
    parser.add_argument("--programs", default="",
                        help="only these (comma-separated names or name prefixes)")
    parser.add_argument("--limit", type=float, default=300,
                        help="seconds an uninterrupted run may take (longer: skipped)")
    args = parser.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    if "postgres" in backends and not sweep.PG_URL:
        print("postgres: skipped (set OPENPROSE_POSTGRES_URL or OPENPROSE_TEST_POSTGRES_URL)")
        backends.remove("postgres")
    corpus, unrunnable = sweep.corpus_programs() if sweep.CORPUS.is_dir() else ([], {})
    work_list = [(p, args.trials) for p in sweep.own_programs()] + \
        [(p, args.corpus_trials) for p in corpus]
    wanted = [w for w in args.programs.split(",") if w]
    if wanted:
        work_list = [(p, t) for p, t in work_list if any(p.name.startswith(w) for w in wanted)]
        unrunnable = {name: why for name, why in unrunnable.items()
                      if any(name.startswith(w) for w in wanted)}
    print(f"{len(work_list)} programs ({len(unrunnable)} more skipped); backends: "
          f"{', '.join(backends)}", flush=True)
    began = time.monotonic()

    def report(backend: str, program: str, tally: sweep.Tally) -> None:
        if tally.skipped:
            print(f"  {backend:<10} {program:<36} skipped: {tally.skipped[program]}", flush=True)
            return
        flag = "  MISMATCH" if tally.mismatches else ""
        rerun = f"  RE-RUN {tally.reran}" if tally.reran else ""
        print(f"  {backend:<10} {program:<36} trials {tally.trials:>2}  kills "
              f"{tally.kills:>2}{flag}{rerun}", flush=True)
        for note in tally.notes:
            print(f"    {note}", flush=True)

    per_backend = {backend: sweep.Tally(skipped=dict(unrunnable)) for backend in backends}
    with tempfile.TemporaryDirectory(prefix="prose-faults-") as work:
        for program, trials in work_list:  # every backend per program: a cut-short run
            for backend in backends:       # still covers all of them
                per_backend[backend].add(sweep.sweep(
                    [program], [backend], trials, Path(work), seed=args.seed,
                    max_kills=args.max_kills, limit=args.limit, report=report))
    print_table(per_backend)
    print(f"({time.monotonic() - began:.0f} s)")


def print_table(per_backend: dict[str, sweep.Tally]) -> None:
    """Counts per backend and in total, then every skipped program with its reason."""
    total = sweep.Tally()
    rows = []
    for backend, tally in per_backend.items():
        rows.append((backend, tally))
        total.add(tally)
        total.skipped = {}  # skipped programs count per backend
    total.skipped = {f"{b}:{name}": why for b, t in per_backend.items()
                     for name, why in t.skipped.items()}
    rows.append(("total", total))
    print(f"\n{'backend':<11}" + "".join(f"{c:>11}" for c in COLUMNS))
    for name, tally in rows:
        values = (tally.programs, tally.trials, tally.kills, tally.mismatches, tally.reran,
                  len(tally.skipped))
        print(f"{name:<11}" + "".join(f"{v:>11}" for v in values))
    for backend, tally in per_backend.items():
        for program, why in sorted(tally.skipped.items()):
            print(f"skipped {backend} {program}: {why}")


if __name__ == "__main__":
    main()
