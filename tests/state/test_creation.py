"""Creating a run is all or nothing: an id with a control character is refused before
anything is written, and a process killed while creating a run leaves no run directory
behind (what it was building is removed by the next creation)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from openprose.state import InvalidNameError, open_store
from openprose.state.backends.filesystem import CREATING

RUN_ID = "20260101-000000-abcdef"

# A child process that creates a run and SIGKILLs itself at its n-th rename.
KILLER = """
import os, signal, sys
from openprose.state import open_store
backend, project, home, kill_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
kw = {"postgres_url": sys.argv[5], "schema": sys.argv[6]} if backend == "postgres" else {}
store = open_store(project, backend, home=home, **kw)
calls = 0
for name in ("replace", "rename"):
    real = getattr(os, name)
    def dying(*args, _real=real, **kwargs):
        global calls
        calls += 1
        if calls == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return _real(*args, **kwargs)
    setattr(os, name, dying)
store.create_run('output x = session "s"\\n', "p.prose", run_id=sys.argv[7])
print("created")
"""


@pytest.mark.parametrize("bad", [f"{RUN_ID}\n", f"{RUN_ID}\r", f"\n{RUN_ID}", f"{RUN_ID} "])
def test_run_id_with_a_control_character_or_space_is_refused(store, project, bad):
    with pytest.raises(InvalidNameError):
        store.create_run("output x = 1\n", run_id=bad)
    runs = project / ".prose" / "runs"
    assert not runs.exists() or [p.name for p in runs.iterdir() if p.name != CREATING] == []
    assert store.list_runs() == []


@pytest.mark.parametrize("kill_at", [1, 2, 3])
def test_a_kill_during_creation_leaves_no_orphan(stores, project, home, kill_at):
    extra = [stores.url, stores.schema] if stores.backend == "postgres" else ["", ""]
    done = subprocess.run([sys.executable, "-c", KILLER, stores.backend, str(project),
                           str(home), str(kill_at), *extra, RUN_ID],
                          capture_output=True, text=True, timeout=120)
    runs = project / ".prose" / "runs"
    if done.returncode == 0:  # fewer renames than kill_at: created whole
        assert (runs / RUN_ID / "program.prose").exists()
        return
    assert done.returncode == -9, done.stderr
    store = stores.open()
    visible = [p.name for p in runs.iterdir() if p.name != CREATING] if runs.exists() else []
    if stores.backend != "postgres":  # PostgreSQL's row may commit after its directory
        assert visible == [] and store.list_runs() == []
    run = store.create_run('output x = session "s"\n', "p.prose")  # sweeps what was left
    staging = project / ".prose" / CREATING
    leftovers = list(staging.iterdir()) if staging.exists() else []
    assert leftovers == []
    assert not list(runs.rglob("*.tmp"))
    assert run.id in {info.id for info in store.list_runs()}


class _DirectoryEvents(FileSystemEventHandler):
    """What one non-recursive watch saw, up to a sentinel file (the watch's events arrive in
    order: once the sentinel's is in, every earlier one is)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.done = threading.Event()

    def on_any_event(self, event: FileSystemEvent) -> None:
        if Path(str(event.src_path)).name == "sentinel":
            self.done.set()
        elif event.is_directory and event.event_type in ("created", "moved"):
            self.seen.append((event.event_type, Path(str(event.dest_path or event.src_path)).name))


def _watched(directory: Path, act: Callable[[], object]) -> list[tuple[str, str]]:
    directory.mkdir(parents=True, exist_ok=True)
    handler, observer = _DirectoryEvents(), Observer()
    observer.schedule(handler, str(directory), recursive=False)
    observer.start()
    try:
        act()
        (directory / "sentinel").write_text("")
        assert handler.done.wait(60), "the watch never saw the sentinel"
    finally:
        observer.stop()
        observer.join()
        (directory / "sentinel").unlink()
    return handler.seen


@pytest.mark.parametrize("backend", ["filesystem", "sqlite"])
def test_a_run_arrives_in_a_watched_directory_as_one_rename(project, home, backend):
    """A recursive watcher of runs/ (the MCP server's) adds a watch per directory; a directory
    made inside another faster than the watcher adds its watches was registered twice by
    watchdog, with a warning of several KB each time. Runs are staged outside runs/ and move
    in whole; a run's agents/ and imports/ exist from the start."""
    store = open_store(project, backend, home=home)
    runs = project / ".prose" / "runs"
    made: list[object] = []
    seen = _watched(runs, lambda: made.append(store.create_run('output x = "y"\n', "p.prose")))
    run = made[0]
    # one directory event, the run's (a rename from an unwatched place shows as "created")
    assert [name for _, name in seen] == [run.id]  # type: ignore[attr-defined]
    inside = _watched(runs / run.id, lambda: run.child(  # type: ignore[attr-defined]
        "alice", "research", 'output x = "y"\n'))
    assert inside == []
    store.close()
