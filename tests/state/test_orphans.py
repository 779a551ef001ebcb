"""Temp files a killed write left behind (``.NAME.PID-N.tmp``) are swept when the run is next
opened: only names of that shape, only when their writer is gone or they are old; a live
writer's temp file and anything else are left alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from openprose.state import open_store


@pytest.mark.parametrize("backend", ["filesystem", "sqlite"])
def test_orphaned_temp_files_are_swept_when_the_run_is_opened(project, home, backend):
    with open_store(project, backend, home=home) as store:
        run_id = store.create_run('output x = "y"\n', "p.prose").id
    run_dir = project / ".prose" / "runs" / run_id
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(gone.stdout)  # that process has exited: its pid names no writer now
    (run_dir / "bindings").mkdir(exist_ok=True)
    orphans = [run_dir / f".state.md.{dead}-0.tmp", run_dir / "bindings" / f".x.md.{dead}-3.tmp"]
    if backend == "filesystem":  # where a run's bindings and state.md are written from
        (project / ".prose" / ".writing").mkdir(exist_ok=True)
        orphans.append(project / ".prose" / ".writing" / f".y.md.{dead}-4.tmp")
    old = run_dir / f".program.prose.{os.getpid()}-7.tmp"  # a live pid, but a day old
    live = run_dir / f".state.md.{os.getpid()}-8.tmp"  # a writer of this process, now
    others = [run_dir / ".notes.tmp", run_dir / f"x.{dead}-1.tmp", run_dir / "notes.md"]
    for path in [*orphans, old, live, *others]:
        path.write_text("partial")
    day_ago = time.time() - 86_400
    os.utime(old, (day_ago, day_ago))
    with open_store(project, backend, home=home) as store:
        store.open_run(run_id)
    assert [p for p in [*orphans, old] if p.exists()] == []
    assert all(p.exists() for p in [live, *others])
