"""`prose watch` delay: how long after a statement's journal record the watcher reports it.

    python bench/watch.py [--sessions 20] [--latency 0.2] [--backends filesystem,sqlite]

A `prose run` of a program of ``--sessions`` sequential sessions (each ``--latency`` seconds
on the scripted provider) with `prose watch --json` following it from another process; per
backend, the delay between each change's recorded moment (its end, or its start) and the
watcher's report of it: median, 99th percentile and maximum. (The suite checks that every
change is reported; how fast is measured here.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROSE = str(Path(sys.executable).with_name("prose"))


def delays(root: Path, backend: str, sessions: int, latency: float) -> list[float]:
    (root / "p.prose").write_text("".join(f'let s{i} = session "Step {i}"\n'
                                          for i in range(sessions)))
    (root / "s.yaml").write_text(f"default_output: ok\nlatency: {latency}\n")
    runner = subprocess.Popen([PROSE, "run", "p.prose", "--provider", "scripted", "--script",
                               "s.yaml", "--state", backend, "--json"], cwd=root,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_id = runner.stderr.readline().split()[1]
    watcher = subprocess.Popen([PROSE, "watch", run_id, "--json"], cwd=root,
                               stdout=subprocess.PIPE, text=True)
    found = []
    for number, line in enumerate(watcher.stdout):
        arrived = time.time()
        if number == 0:  # the state the watcher found on starting
            continue
        for step in json.loads(line)["changed"]:
            at = step.get("ended_at") or step.get("started_at")
            if at is not None:
                found.append(arrived - at)
    watcher.wait()
    runner.communicate()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--backends", default="filesystem,sqlite")
    args = parser.parse_args()
    print(f"{'backend':<11} {'changes':>7} {'median':>8} {'p99':>8} {'max':>8}")
    for backend in args.backends.split(","):
        with tempfile.TemporaryDirectory() as scratch:
            found = sorted(delays(Path(scratch), backend, args.sessions, args.latency))
        p99 = found[min(len(found) - 1, int(len(found) * 0.99))]
        print(f"{backend:<11} {len(found):>7} {statistics.median(found):>7.3f}s "
              f"{p99:>7.3f}s {found[-1]:>7.3f}s")


if __name__ == "__main__":
    main()
