"""Concurrent resumes of one interrupted run: how many sessions run, how many drivers are
refused. One command: ``python bench/driver.py [N] [BACKEND]`` (default 16 filesystem).

A run of 9 slow scripted sessions is SIGKILLed during its first session; then N `prose
resume` processes start at once. With one driver per run exactly one drives (9 session
starts in all), the others are refused at once (or find the run finished)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROGRAM = "".join(f'let s{i} = session "step {i}"\n' for i in range(8)) + \
    'output o = session "final"\n'
SCRIPT = "latency: 0.3\ncall_log: calls.jsonl\ndefault_output: ok\n"
CLI = [sys.executable, "-c", "from openprose.cli import main; main()"]


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    backend = sys.argv[2] if len(sys.argv) > 2 else "filesystem"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "p.prose").write_text(PROGRAM)
        (root / "s.yaml").write_text(SCRIPT)
        run = subprocess.Popen([*CLI, "run", "p.prose", "--provider", "scripted", "--script",
                                "s.yaml", "--state", backend], cwd=root,
                               stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        run_id = run.stderr.readline().split()[1]
        while not (root / "calls.jsonl").exists():
            time.sleep(0.02)
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
        run.stderr.close()
        before = len((root / "calls.jsonl").read_text().splitlines())
        started = time.monotonic()
        procs = [subprocess.Popen([*CLI, "resume", run_id], cwd=root, text=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for _ in range(count)]
        results = [(p.wait(), p.stderr.read()) for p in procs]
        for p in procs:
            p.stderr.close()
        elapsed = time.monotonic() - started
        calls = [json.loads(line) for line in
                 (root / "calls.jsonl").read_text().splitlines()[before:]]
        starts = [c["key"] for c in calls if c["kind"] == "session" and c["phase"] == "start"]
        refused = sum(1 for code, err in results if code == 2 and "being driven by" in err)
        print(f"backend {backend}: {count} concurrent resumes in {elapsed:.1f} s")
        print(f"  completed {sum(1 for code, _ in results if code == 0)}, refused {refused}, "
              f"other {count - refused - sum(1 for code, _ in results if code == 0)}")
        print(f"  session starts after the kill {len(starts)} ({len(set(starts))} distinct; "
              "the program has 9 sessions)")


if __name__ == "__main__":
    main()
