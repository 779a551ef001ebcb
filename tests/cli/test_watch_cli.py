"""`prose watch` while a second process advances a run: every new statement shows up within
a second of its journal record, and the watcher exits when the run ends."""

from __future__ import annotations

import json
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
SCRIPT = "default_output: ok\nlatency: 0.7\n"


@pytest.mark.parametrize("backend", ["filesystem", "sqlite"])
def test_watch_follows_a_run_driven_by_another_process(tmp_path: Path, backend: str) -> None:
    (tmp_path / "p.prose").write_text(PROGRAM)
    (tmp_path / "s.yaml").write_text(SCRIPT)
    runner = subprocess.Popen(
        [PROSE, "run", "p.prose", "--provider", "scripted", "--script", "s.yaml", "--state",
         backend, "--json"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        first = runner.stderr.readline()
        assert first.startswith("run ") and first.strip().endswith("started"), first
        run_id = first.split()[1]
        watcher = subprocess.Popen([PROSE, "watch", run_id, "--json"], cwd=tmp_path,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen: list[tuple[float, dict]] = []
        for line in watcher.stdout:
            seen.append((time.time(), json.loads(line)))
        assert watcher.wait(timeout=30) == 0, watcher.stderr.read()
        assert runner.wait(timeout=30) == 0
    finally:
        for proc in (runner,):
            if proc.poll() is None:
                proc.kill()
    assert seen[-1][1]["status"] == "completed"
    delays = []
    shown: set[tuple[int, str]] = set()
    for arrived, report in seen[1:]:  # the first report is the state the watcher found
        for step in report["changed"]:
            shown.add((step["line"], step["status"]))
            at = step.get("ended_at") or step.get("started_at")
            delays.append(arrived - at)
    # every statement the run made after the watcher started was reported as it finished
    assert {(5, "complete"), (3, "complete"), (4, "complete")} <= shown | {
        (s["line"], s["status"]) for s in seen[0][1]["changed"]}
    assert (5, "executing") in shown
    print(f"watch delays ({backend}): max {max(delays):.3f}s over {len(delays)} changes")
    assert max(delays) < 1.0
