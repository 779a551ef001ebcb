"""`prose clean` on runs the engine made, on every backend: age, --keep, --status, --dry-run;
running runs and copies of a run on another backend survive."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.cli.conftest import Project, run_id_of

PROGRAM = 'let research = session "Collect facts"\noutput summary = session "Summarize"\n'
FAILING = 'let research = session "Collect facts"\nthrow "no facts"\n'


def age(project: Project, run_id: str, days: int) -> None:
    """Make a run look as if it started and ended ``days`` ago (the clock is the only thing
    a test cannot wait for)."""
    stamp = (datetime.now(UTC) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")
    run_dir = project.root / ".prose" / "runs" / run_id
    if project.backend == "filesystem":
        record = json.loads((run_dir / "run.json").read_text())
        record.update(started=stamp, updated=stamp)
        (run_dir / "run.json").write_text(json.dumps(record))
    elif project.backend == "sqlite":
        import sqlite3

        with sqlite3.connect(run_dir / "state.db") as conn:
            conn.execute("UPDATE run SET started_at = ?, updated_at = ?", (stamp, stamp))
        conn.close()
    else:
        import psycopg

        with psycopg.connect(os.environ["OPENPROSE_POSTGRES_URL"], autocommit=True) as conn:
            conn.execute(f'UPDATE "{os.environ["OPENPROSE_POSTGRES_SCHEMA"]}".run SET '
                         "started_at = %s, updated_at = %s WHERE id = %s",
                         (stamp, stamp, run_id))


def listed(project: Project) -> list[str]:
    out = project.prose("runs", "--json", "--project", str(project.root)).stdout
    return sorted(row["run_id"] for row in json.loads(out)["runs"])


def clean(project: Project, *args: str) -> dict:
    text = project.prose("clean", *args, "--project", str(project.root))
    assert all(len(line) <= 80 for line in text.stdout.splitlines()), text.stdout
    assert "\x1b[" not in text.stdout and "Traceback" not in text.output
    return {"exit": text.exit_code, "text": text.stdout, "err": text.stderr}


def test_clean_by_age_keep_and_status_never_touches_a_running_run(project: Project) -> None:
    old_ok = run_id_of(project.run(PROGRAM))
    old_failed = run_id_of(project.run(FAILING))
    recent = run_id_of(project.run(PROGRAM))
    from openprose.state import open_store

    with open_store(project.root, project.backend) as store:
        running = store.create_run(PROGRAM, "p.prose").id  # a driver is still at work
    for run_id in (old_ok, old_failed, running):
        age(project, run_id, 40)

    dry = project.prose("clean", "--older-than", "30d", "--dry-run", "--json",
                        "--project", str(project.root))
    plan = json.loads(dry.stdout)
    assert sorted(row["run_id"] for row in plan["removed"]) == sorted([old_ok, old_failed])
    assert plan["kept_running"] == [running] and plan["dry_run"] is True
    assert listed(project) == sorted([old_ok, old_failed, recent, running])  # untouched

    only_failed = clean(project, "--older-than", "30d", "--status", "failed")
    assert only_failed["exit"] == 0
    assert f"removed {old_failed}  failed" in only_failed["text"]
    assert listed(project) == sorted([old_ok, recent, running])

    kept = clean(project, "--keep", "1")
    assert kept["exit"] == 0, kept
    assert f"removed {old_ok}" in kept["text"] and "removed 1 run" in kept["text"]
    assert f"kept {running}: it is running" in kept["text"]
    assert listed(project) == sorted([recent, running])
    shown = project.prose("show", recent, "--project", str(project.root))
    assert shown.exit_code == 0 and "completed" in shown.stdout

    nothing = clean(project, "--older-than", "30d")
    assert "no run matched: nothing to remove" in nothing["text"]
    if project.backend != "postgres":
        runs_dir = project.root / ".prose" / "runs"
        assert sorted(p.name for p in runs_dir.iterdir()) == sorted([recent, running])
        assert not any((project.root / ".prose" / ".trash").iterdir())
        lock_files = {p.name for p in (project.root / ".prose" / "locks").glob("*.lock")}
        assert not lock_files & {f"{old_ok}.lock", f"{old_failed}.lock"}


def test_the_state_api_refuses_to_delete_a_running_or_driven_run(project: Project) -> None:
    from openprose.state import StateError, open_store
    from openprose.state.driver import RunLocked

    with open_store(project.root, project.backend) as store:
        run = store.create_run(PROGRAM, "p.prose")
        with pytest.raises(StateError, match="marked running but no process drives it"):
            store.delete_run(run.id)
        run.finish("interrupted")
        # a driver resuming it, say
        with store.driver_lock(run.id), pytest.raises(RunLocked, match=f"pid {os.getpid()}"):
            store.delete_run(run.id)
        store.delete_run(run.id)
        assert [info.id for info in store.list_runs()] == []


def test_clean_skips_a_finished_run_whose_driver_is_alive(project: Project) -> None:
    run_id = run_id_of(project.run(PROGRAM))
    from openprose.state import open_store

    with open_store(project.root, project.backend) as store, store.driver_lock(run_id):
        held = clean(project, "--keep", "0")
    assert held["exit"] == 1
    assert f"could not remove {run_id}: run {run_id} is being driven by pid" in held["err"]
    assert listed(project) == [run_id]
    assert clean(project, "--keep", "0")["exit"] == 0
    assert listed(project) == []


def test_a_run_exported_to_another_backend_keeps_its_copy(tmp_path: Path) -> None:
    project = Project(tmp_path, "filesystem")
    run_id = run_id_of(project.run(PROGRAM))
    exported = project.prose("export", run_id, "--to", "sqlite", "--project", str(tmp_path))
    assert exported.exit_code == 0, exported.output
    result = clean(project, "--keep", "0", "--state", "filesystem")
    assert result["exit"] == 0 and f"removed {run_id}" in result["text"]
    rows = json.loads(project.prose("runs", "--json", "--project", str(tmp_path)).stdout)
    assert [(r["run_id"], r["backend"]) for r in rows["runs"]] == [(run_id, "sqlite")]
    value = project.prose("show", run_id, "summary", "--project", str(tmp_path))
    assert value.exit_code == 0 and value.stdout == "ok\n"
    assert clean(project, "--keep", "0")["exit"] == 0
    assert not (tmp_path / ".prose" / "runs" / run_id).exists()


def test_clean_needs_a_criterion_and_a_valid_age(tmp_path: Path) -> None:
    project = Project(tmp_path, "filesystem")
    bare = clean(project)
    assert bare["exit"] == 2 and "--older-than AGE" in bare["err"]
    bad = clean(project, "--older-than", "soon")
    assert bad["exit"] == 2 and "'soon' is not an age like 30d" in bad["err"]
