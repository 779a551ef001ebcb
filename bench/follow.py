"""The embodied checks over the whole corpus: for each program a scripted host walks it
correctly (it must be accepted and leave the run ``prose run`` leaves), then again with
single deviations — a statement skipped, a verdict left out, the other branch taken, a
statement started twice, one loop round too many, a changed prompt — each of which must be
refused at that step, naming what the program expects there (tests/mcp_server/deviate.py).

    python bench/follow.py [--programs 25-conditionals.prose ...] [--timeout 120]

Prints one line per program (steps, deviations refused, seconds) and the programs skipped
with the reason. tests/mcp_server/test_follow_corpus.py runs the same checks in the suite, all
in one process, on the programs that between them have every construct the corpus has; this
sweep walks every program, each in its own process, with its own timeout and time.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # not bench/: its mcp.py is no package

from tests.mcp_server.deviate import check_program  # noqa: E402
from tests.mcp_server.host import CORPUS  # noqa: E402
from tests.mcp_server.test_follow_corpus import SCRIPT, SKIPPED  # noqa: E402


def _one(name: str, queue: multiprocessing.Queue) -> None:
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            checked = check_program(Path(tmp), name, (CORPUS / name).read_text(), SCRIPT)
        kinds = ", ".join(d.kind for d in checked.deviations)
        queue.put(f"{name}: ok, {checked.steps} steps, {len(checked.deviations)} deviations "
                  f"refused ({kinds}), {time.monotonic() - started:.1f} s")
    except BaseException as err:  # a failure is reported, the sweep goes on
        queue.put(f"{name}: FAILED {type(err).__name__}: {str(err)[:300]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", nargs="*")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    names = args.programs or sorted(p.name for p in CORPUS.glob("*.prose"))
    failed = 0
    for name in names:
        if name in SKIPPED:
            print(f"{name}: skipped ({SKIPPED[name]})")
            continue
        queue: multiprocessing.Queue = multiprocessing.Queue()
        process = multiprocessing.Process(target=_one, args=(name, queue))
        process.start()
        process.join(args.timeout)
        if process.is_alive():
            process.kill()
            print(f"{name}: TIMEOUT after {args.timeout:.0f} s")
            failed += 1
            continue
        line = queue.get()
        failed += "FAILED" in line
        print(line, flush=True)
    print(f"{len(names)} programs, {failed} failed")


if __name__ == "__main__":
    main()
