"""Kill tests: SIGKILL `prose run` at random points, resume until done, and compare.

Each backend gets a run killed at seeded random moments and resumed (killed again, possibly)
until it completes. Then: its outputs equal an uninterrupted run's; the provider's call log
shows no session started again after its result was committed; every named binding exists.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openprose.state import open_store

PROGRAM = '''\
let xs = ["a", "b", "c"]
parallel:
  p = session "branch P"
  q = session "branch Q"
let r = for x in xs:
  session "step {x}"
loop until **enough** (max: 3) as i:
  let l = session "round {i}"
output final = session "final"
  context: { p, q, r, l }
'''
SCRIPT = '''\
latency: 0.04
call_log: calls.jsonl
sessions:
  - match: "branch (P|Q)"
    output: "branch \\\\1 done"
    latency: 0.09
  - match: "(step|round) (\\\\w+)"
    output: "\\\\1-\\\\2"
  - match: "final"
    output: "final over: \\\\g<0>"
conditions:
  - match: "enough"
    verdicts: [false, false, true]
'''
ATTEMPTS = 6
CLI = [sys.executable, "-c", "from openprose.cli import main; main()"]


def _prose(args, cwd, stderr_path):
    with open(stderr_path, "w") as err:
        return subprocess.Popen([*CLI, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=err,
                                text=True)


def _project(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    root.mkdir()
    (root / "p.prose").write_text(PROGRAM)
    (root / "s.yaml").write_text(SCRIPT)
    return root


def _run_id(stderr_path: Path) -> str | None:
    for line in stderr_path.read_text().splitlines():
        if line.startswith("run ") and " started" in line:
            return line.split()[1]
    return None


def _finish(proc) -> dict:
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return json.loads(out)


def _reference(tmp_path: Path, backend: str) -> dict:
    root = _project(tmp_path, f"ref-{backend}")
    args = ["run", "p.prose", "--provider", "scripted", "--script", "s.yaml", "--state",
            backend, "--json"]
    return _finish(_prose(args, root, root / "err.txt"))["outputs"]




pytestmark = pytest.mark.usefixtures("postgres_env")


def test_sigkill_and_resume_matches_uninterrupted_run(tmp_path, backend):
    expected = _reference(tmp_path, backend)
    rng = random.Random(f"kill-{backend}")
    kills = 0
    for attempt in range(ATTEMPTS):
        root = _project(tmp_path, f"kill-{backend}-{attempt}")
        base = ["--provider", "scripted", "--script", "s.yaml", "--json"]
        proc = _prose(["run", "p.prose", "--state", backend, *base], root, root / "err0.txt")
        run_id, hop = None, 0
        while True:
            time.sleep(rng.uniform(0.3, 0.75))  # startup takes about 0.35 s
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                kills += 1
            elif proc.returncode == 0:
                outputs = json.loads(proc.stdout.read())["outputs"]
                break
            run_id = run_id or _run_id(root / f"err{hop}.txt")
            if run_id is None:  # killed before the run existed: start over
                proc = _prose(["run", "p.prose", "--state", backend, *base], root,
                              root / f"err{hop + 1}.txt")
            else:
                proc = _prose(["resume", run_id, "--state", backend, *base], root,
                              root / f"err{hop + 1}.txt")
            hop += 1
            if hop > 8:  # let it finish
                outputs = _finish(proc)["outputs"]
                break
        assert outputs == expected
        _assert_no_committed_session_reran(root / "calls.jsonl")
        # (killed before the run existed, the run that finished was started later)
        run_id = run_id or next(filter(None, (_run_id(root / f"err{i}.txt")
                                              for i in range(hop + 1))))
        _assert_bindings_kept(root, backend, run_id)
    assert kills >= 10


def _assert_bindings_kept(root: Path, backend: str, run_id: str) -> None:
    with open_store(root, backend) as store:
        names = {b.name for b in store.open_run(run_id).bindings()}
    assert {"xs", "p", "q", "r", "l", "final"} <= names


def _assert_no_committed_session_reran(log: Path) -> None:
    committed: set[str] = set()
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if entry["kind"] != "session":
            continue
        if entry["phase"] == "committed":
            committed.add(entry["key"])
        elif entry["phase"] == "start":
            assert entry["key"] not in committed, f"finished session re-ran: {entry['key']}"
