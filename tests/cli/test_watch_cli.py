"""`prose watch` while other processes drive a run: every new statement shows up, the watcher
keeps following when one driver dies and another resumes, and it exits when the run ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROSE = str(Path(sys.executable).with_name("prose"))
PROGRAM = """\
let research = session "Collect facts"
parallel:
  a = session "Analyze A"
  b = session "Analyze B"
output summary = session "Summarize"
  context: research
"""


def _script(held: str | None) -> str:
    """Sessions answer "ok" at once; the one matching ``held`` never answers (its driver is
    killed there), so each step below waits on what the watcher shows, not on speed."""
    rule = f"sessions:\n  - match: {held}\n    output: ok\n    latency: 3600\n" if held else ""
    return f"default_output: ok\nlatency: 0.05\n{rule}"


def _drive(root: Path, backend: str, script: str, run_id: str | None) -> subprocess.Popen:
    (root / f"{script}.yaml").write_text(_script(None if script == "quick" else script))
    head = ["run", "p.prose"] if run_id is None else ["resume", run_id]
    return subprocess.Popen([PROSE, *head, "--provider", "scripted", "--script",
                             f"{script}.yaml", "--state", backend, "--json"], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()


@pytest.mark.parametrize("backend", ["filesystem", "sqlite"])
def test_watch_follows_a_run_driven_by_other_processes(tmp_path: Path, backend: str) -> None:
    (tmp_path / "p.prose").write_text(PROGRAM)
    drivers = [_drive(tmp_path, backend, "Collect", None)]
    watcher = None
    seen: list[tuple[float, dict]] = []
    try:
        first = drivers[0].stderr.readline()
        assert first.startswith("run ") and first.strip().endswith("started"), first
        run_id = first.split()[1]
        watcher = subprocess.Popen([PROSE, "watch", run_id, "--json"], cwd=tmp_path,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = iter(watcher.stdout)

        def until(line: int, status: str) -> None:
            for text in lines:
                seen.append((time.time(), json.loads(text)))
                if (line, status) in {(c["line"], c["status"]) for c in seen[-1][1]["changed"]}:
                    return
            raise AssertionError(f"the watcher ended before line {line} was {status}")

        until(1, "executing")  # the watcher is following, the first session is held
        _kill(drivers[-1])
        drivers.append(_drive(tmp_path, backend, "Summarize", run_id))
        until(5, "executing")
        _kill(drivers[-1])
        drivers.append(_drive(tmp_path, backend, "quick", run_id))
        for text in lines:
            seen.append((time.time(), json.loads(text)))
        assert watcher.wait(timeout=60) == 0, watcher.stderr.read()
        _, err = drivers[-1].communicate(timeout=60)
        assert drivers[-1].returncode == 0, err
    finally:
        for proc in [*drivers, watcher]:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert seen[-1][1]["status"] == "completed"
    delays = []
    shown: set[tuple[int, str]] = set()
    for arrived, report in seen[1:]:  # the first report is the state the watcher found
        for step in report["changed"]:
            shown.add((step["line"], step["status"]))
            at = step.get("ended_at") or step.get("started_at")
            delays.append(arrived - at)
    # every statement the drivers made after the watcher started was reported
    assert {(3, "complete"), (4, "complete"), (5, "executing"), (5, "complete")} <= shown
    print(f"watch delays ({backend}): max {max(delays):.3f}s over {len(delays)} changes")
