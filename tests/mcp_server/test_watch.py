"""Writes to a live filesystem run by another process are noticed, checked and reported."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from openprose.mcp_server.resources import RunCatalog, register
from openprose.mcp_server.updates import RunUpdates
from openprose.mcp_server.watch import OutsideWrite, RunWatcher, watching
from openprose.state import BindingRef, StatementStatus, StateSnapshot, open_store

PROGRAM = 'let draft = session "Write a draft"\noutput final = draft\n'


def _second_writer(path: Path, text: str) -> None:
    """Another process writes ``text`` to ``path`` in place, as a careless tool would."""
    code = "import sys; open(sys.argv[1], 'w').write(sys.argv[2])"
    subprocess.run([sys.executable, "-c", code, str(path), text], check=True)


@pytest.fixture
def live_run(tmp_path: Path):
    root = tmp_path / "project"
    store = open_store(root, "filesystem", home=tmp_path / "home")
    run = store.create_run(PROGRAM, "draft.prose")
    grant = run.grant_session(BindingRef("draft"), "let", 'session "Write a draft"')
    store.session(grant.token).write_output("the draft")
    run.complete_session(grant.token, key="0:draft")
    run.write_binding(BindingRef("topic"), "owls", "input", "input topic")
    reports: queue.Queue[OutsideWrite] = queue.Queue()
    watcher = RunWatcher(root, reports.put, home=tmp_path / "home")
    watcher.start()
    yield run, watcher, reports
    watcher.stop()
    store.close()


def _next(reports: queue.Queue[OutsideWrite]) -> OutsideWrite:
    return reports.get(timeout=60)


def test_a_torn_binding_from_another_process_is_restored_from_the_journal(live_run) -> None:
    run, watcher, reports = live_run
    path = Path(run.location) / "bindings" / "draft.md"
    good = path.read_text()
    _second_writer(path, "# draft\nkind: let\n\nnot the whole file")
    report = _next(reports)
    assert (report.run_id, report.path, report.binding) == (run.id, "bindings/draft.md", "draft")
    assert report.outcome == "restored from the journal"
    assert path.read_text() == good
    assert watcher.reports(run.id) == [report]


def test_a_different_value_is_not_accepted_over_the_journal(live_run) -> None:
    run, _, reports = live_run
    path = Path(run.location) / "bindings" / "draft.md"
    good = path.read_text()
    _second_writer(path, good.replace("the draft", "a forged draft"))
    assert _next(reports).problem == "disagreed with the run's journal"
    assert run.read_binding(BindingRef("draft")).value == "the draft"


def test_a_malformed_binding_without_a_journal_value_is_reported(live_run) -> None:
    run, _, reports = live_run
    _second_writer(Path(run.location) / "bindings" / "topic.md", "# other\n\nowls")
    report = _next(reports)
    assert report.path == "bindings/topic.md" and "malformed binding file" in report.problem
    assert "left as found" in report.outcome


def test_a_state_file_not_rendered_by_the_server_is_reported(live_run) -> None:
    run, _, reports = live_run
    _second_writer(Path(run.location) / "state.md", "all done, trust me\n")
    report = _next(reports)
    assert (report.path, report.binding) == ("state.md", None)
    assert report.problem == "not a rendering of this run by the server"


def test_a_burst_of_outside_writes_is_checked_together(live_run) -> None:
    run, watcher, reports = live_run
    location = Path(run.location)
    good = (location / "bindings" / "draft.md").read_text()
    _second_writer(location / "bindings" / "draft.md", "torn")
    _second_writer(location / "state.md", "forged\n")
    found = sorted((_next(reports).path, _next(reports).path))
    assert found == ["bindings/draft.md", "state.md"]
    assert (location / "bindings" / "draft.md").read_text() == good
    assert len(watcher.reports(run.id)) == 2


def test_the_servers_own_writes_are_not_reported(live_run) -> None:
    run, _, reports = live_run
    run.write_binding(BindingRef("final"), "the draft", "output", "output final = draft")
    run.update_state(StateSnapshot(statuses=(StatementStatus(1, 1, "complete", "draft"),)))
    _second_writer(Path(run.location) / "state.md", "forged\n")  # a marker: reports are FIFO
    assert _next(reports).path == "state.md"
    assert reports.empty()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_subscriber_hears_of_an_outside_write_and_the_state_lists_it(
        anyio_backend: str, tmp_path: Path) -> None:
    root = tmp_path / "project"
    store = open_store(root, "filesystem", home=tmp_path / "home")
    run = store.create_run(PROGRAM, "draft.prose")
    updates = RunUpdates()
    server = MCPServer("watch-test", subscriptions=updates.bus)
    updates.attach(server)
    received: list[str] = []

    async def on_message(message: object) -> None:
        if getattr(message, "method", "") == "notifications/resources/updated":
            received.append(message.params.uri)  # type: ignore[attr-defined]

    state_uri = f"prose://runs/{run.id}/state"
    async with watching(root, updates, home=tmp_path / "home") as watcher:
        register(server, RunCatalog(root, home=tmp_path / "home"),
                 lambda run_id: [r.line() for r in watcher.reports(run_id)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            async with Client(server, mode="legacy", message_handler=on_message) as client:
                await client.subscribe_resource(state_uri)
                await anyio.to_thread.run_sync(_second_writer, Path(run.location) / "state.md",
                                               "forged\n")
                with anyio.fail_after(60):
                    while state_uri not in received:
                        await anyio.sleep(0.02)
                state = (await client.read_resource(state_uri)).contents[0].text
    assert state.startswith("forged\n")
    assert f"- run {run.id}: state.md: not a rendering of this run by the server" in state
    store.close()


def test_stop_waits_for_a_check_in_flight_and_nothing_is_reported_after(live_run) -> None:
    """A server shutting down while a check runs: stop() returns once the check has ended
    (its store closed), and what it found is not reported to a server that is gone."""
    run, watcher, reports = live_run
    started, release = threading.Event(), threading.Event()

    def slow_check(run_id: str, changed: list[str]) -> list[OutsideWrite]:
        started.set()
        release.wait(10)
        return [OutsideWrite(run_id, changed[0], "found late", "left as found")]

    watcher.check_bindings = slow_check
    _second_writer(Path(run.location) / "bindings" / "draft.md", "changed")
    assert started.wait(60)
    threading.Timer(0.3, release.set).start()
    watcher.stop()
    assert release.is_set()
    time.sleep(0.2)
    assert reports.empty() and watcher.reports(run.id) == []


def test_the_runs_own_writes_wake_a_watcher_once_per_file(tmp_path: Path) -> None:
    """A binding (from a session's result and from the VM), state.md and the digest are
    built outside runs/ and renamed in: a watcher of runs/ gets one event per file written,
    never the temp file's creation, close and move (each event wakes the watcher's threads,
    which then contend with the server's for the interpreter lock)."""
    from watchdog.events import FileSystemEvent, FileSystemEventHandler
    from watchdog.observers import Observer

    from openprose.mcp_server.watch import EVENTS

    root = tmp_path / "project"
    store = open_store(root, "filesystem", home=tmp_path / "home")
    run = store.create_run(PROGRAM, "draft.prose")
    seen: queue.Queue[FileSystemEvent] = queue.Queue()

    class Seen(FileSystemEventHandler):
        def on_any_event(self, event: FileSystemEvent) -> None:
            if not event.is_directory:
                seen.put(event)

    observer = Observer()
    observer.schedule(Seen(), str(root / ".prose" / "runs"), recursive=True,
                      event_filter=EVENTS)
    observer.start()
    try:
        grant = run.grant_session(BindingRef("draft"), "let", 'session "Write a draft"')
        run.complete_session(grant.token, key="0:draft", value="the draft")
        run.write_binding(BindingRef("topic"), "owls", "input", "input topic")
        run.update_state(StateSnapshot((StatementStatus(1, 1, "complete"),)))
        marker = Path(run.location) / "marker"
        marker.write_text("end")  # events arrive in order: everything before it came first
        names: list[str] = []
        while True:
            event = seen.get(timeout=60)
            paths = [str(event.src_path), str(getattr(event, "dest_path", "") or "")]
            if str(marker) in paths:
                break
            names.append(Path(paths[1] or paths[0]).name)
    finally:
        observer.stop()
        observer.join()
        store.close()
    assert not [name for name in names if name.endswith(".tmp")], names
    assert sorted(name for name in names if name.endswith(".md")) == [
        "draft.md", "state.md", "topic.md"], names
