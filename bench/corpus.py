"""Corpus programs at full size.

    python bench/corpus.py [--programs 28-gas-town.prose,...]

The suite's tests/engine/test_corpus.py runs the programs in its ``BOUNDED`` with lower loop
bounds; this runs them with their own (28-gas-town: two patrol loops of 1,000 rounds, about
19,000 sessions) on the scripted provider with filesystem state, checks each run as that test
checks every program (it completes, or fails only as the program asks; its outputs are
reported; every journal key names a statement), and prints the sessions and seconds of each.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conftest import CORPUS
from tests.engine.test_corpus import BOUNDED, check_program_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--programs", default=",".join(sorted(BOUNDED)),
                        help="comma-separated corpus file names (default: those the suite "
                             "bounds)")
    names = [name for name in parser.parse_args().programs.split(",") if name]
    for name in names:
        path = CORPUS / name
        if not path.is_file():
            raise SystemExit(f"{path}: no such corpus program")
        root = Path(tempfile.mkdtemp(prefix="openprose-bench-corpus-"))
        try:
            started = time.perf_counter()
            sessions = check_program_run(path, path.read_text(encoding="utf-8"), root)
            took = time.perf_counter() - started
        except AssertionError as failed:
            raise SystemExit(f"{name}: FAILED: {failed}") from None
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(f"{name}: ok, {sessions:,} sessions in {took:.1f} s")


if __name__ == "__main__":
    main()
