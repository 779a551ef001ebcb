"""Kill tests: SIGKILL `prose run` at seeded random points of its work, resume until done, and
compare.

Each backend gets three runs, each killed and resumed two or three times, then completed.
A kill lands right after a seeded random record of the scripted provider's call log: a
session started, ended (answered, not yet committed) or committed, or a judgment. In the
drives that are killed the final session never answers (its script holds it), so each drive
is certainly alive when its kill comes, however fast the machine. Then: the outputs equal
an uninterrupted run's; the call log shows no session started again after its result was
committed; every named binding exists.
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
from tests.conftest import PG_URL

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
# The script of a drive that will be killed: the final session waits until the kill.
HOLD = SCRIPT.replace("sessions:\n", 'sessions:\n  - match: "final"\n    output: "held"\n'
                                     '    latency: 3600\n', 1)
ATTEMPTS = 3  # runs per backend, each killed 2 or 3 times (a kill point per kill)
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
    (root / "hold.yaml").write_text(HOLD)
    return root


def _run_id(stderr_path: Path) -> str:
    for line in stderr_path.read_text().splitlines():
        if line.startswith("run ") and " started" in line:
            return line.split()[1]
    raise AssertionError(f"no run id in {stderr_path.read_text()!r}")


def _finish(proc) -> dict:
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return json.loads(out)


def _log(root: Path) -> list[dict]:
    log = root / "calls.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line) for line in lines if line.endswith("}")]


def _kill_after(proc, root: Path, records: int, timeout: float = 60) -> None:
    """SIGKILL ``proc`` once the call log holds ``records`` records, or once the held final
    session has started (it never ends on its own)."""
    first = len(_log(root))
    deadline = time.monotonic() + timeout
    while True:
        log = _log(root)
        if len(log) >= records or any(entry["phase"] == "start" and entry["key"] == FINAL
                                      for entry in log[first:]):
            break
        assert proc.poll() is None, f"the held drive ended (exit {proc.returncode})"
        assert time.monotonic() < deadline, f"no record {records} within {timeout:.0f} s"
        time.sleep(0.005)  # polls the log for the record
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


FINAL = "4"  # the final session's key (the program's fifth statement)


def _reference(tmp_path: Path, backend: str) -> tuple[dict, int]:
    """The uninterrupted run's outputs and the number of records in its call log."""
    root = _project(tmp_path, f"ref-{backend}")
    args = ["run", "p.prose", "--provider", "scripted", "--script", "s.yaml", "--state",
            backend, "--json"]
    outputs = _finish(_prose(args, root, root / "err.txt"))["outputs"]
    return outputs, len(_log(root))


pytestmark = pytest.mark.usefixtures("postgres_env")
BACKENDS = ["filesystem", "sqlite", pytest.param(
    "postgres", marks=[pytest.mark.postgres, pytest.mark.skipif(
        not PG_URL, reason="needs OPENPROSE_TEST_POSTGRES_URL (scripts/pg-up)")])]


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigkill_and_resume_matches_uninterrupted_run(tmp_path, backend):
    expected, records = _reference(tmp_path, backend)
    rng = random.Random(f"kill-{backend}")
    kills = planned = 0
    for attempt in range(ATTEMPTS):
        root = _project(tmp_path, f"kill-{backend}-{attempt}")
        base = ["--state", backend, "--provider", "scripted", "--json"]
        drives = rng.randint(2, 3)
        planned += drives
        proc = _prose(["run", "p.prose", *base, "--script", "hold.yaml"], root,
                      root / "err0.txt")
        for hop in range(1, drives + 1):
            _kill_after(proc, root, len(_log(root)) + rng.randint(1, records))
            kills += 1
            script = "hold.yaml" if hop < drives else "s.yaml"
            proc = _prose(["resume", _run_id(root / "err0.txt"), *base, "--script", script],
                          root, root / f"err{hop}.txt")
        outputs = _finish(proc)["outputs"]
        assert outputs == expected
        _assert_no_committed_session_reran(root / "calls.jsonl")
        _assert_bindings_kept(root, backend, _run_id(root / "err0.txt"))
    assert kills == planned >= 2 * ATTEMPTS


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
