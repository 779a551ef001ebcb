"""The pool of workers, with real `prose worker` processes on a real PostgreSQL: a queued run
is claimed and driven; a worker SIGKILLed mid-run loses nothing (another takes its run over
from the journal); SIGTERM hands runs back; `prose cancel` stops queued and running runs; the
global session cap holds across workers.

Every wait is on a record: the scripted provider's call log or the run's status, never a
sleep. Workers beat every 0.2 s and count as dead after 1.5 s of silence."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from tests.engine.cli_procs import make_project, prose, stop, wait_for

from openprose.state import open_store

pytestmark = pytest.mark.postgres

PROGRAM = '''\
let a = session "step A"
let b = session "step B"
output o = session "final"
  context: { a, b }
'''


def script(hold_b: bool) -> str:
    """Sessions of 50 ms; "step B" held for an hour when ``hold_b`` (a run alive until its
    worker is killed, stopped or cancelled, however slow the machine)."""
    held = "\n    latency: 3600" if hold_b else ""
    return f'''\
latency: 0.05
call_log: calls.jsonl
sessions:
  - match: "step A"
    output: "did A"
  - match: "step B"
    output: "did B"{held}
  - match: "final"
    output: "final"
'''


@pytest.fixture
def root(tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("OPENPROSE_WORKER_HEARTBEAT", "0.2")
    monkeypatch.setenv("OPENPROSE_WORKER_STALLED_AFTER", "1.5")
    yield from make_project(tmp_path / "project", PROGRAM, script(hold_b=True), "postgres",
                            monkeypatch)


@pytest.fixture
def workers(root: Path) -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        stop(proc)


def worker(root: Path, started: list[subprocess.Popen], name: str,
           *args: str) -> subprocess.Popen:
    proc = prose(root, "worker", *args, name=name)
    started.append(proc)
    return proc


def cli(root: Path, *args: str) -> Result:
    """``prose ARGS`` in this process (no interpreter to start), in ``root``."""
    from openprose.cli import cli as prose_cli

    return CliRunner().invoke(prose_cli, [*args, "--project", str(root)])


def enqueue(root: Path) -> str:
    done = cli(root, "run", str(root / "p.prose"), "--state", "postgres", "--detach",
               "--provider", "scripted", "--script", str(root / "s.yaml"))
    assert done.exit_code == 0, done.output
    return done.stdout.strip()


def calls(root: Path) -> list[dict]:
    log = root / "calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


def started(root: Path, text: str) -> int:
    return sum(1 for c in calls(root) if c["phase"] == "start" and c.get("text") == text)


def column(root: Path, sql: str, run_id: str) -> object:
    """One value about ``run_id`` from the runs' schema (no store opened on every poll)."""
    import psycopg

    schema = os.environ["OPENPROSE_POSTGRES_SCHEMA"]
    with psycopg.connect(os.environ["OPENPROSE_POSTGRES_URL"]) as conn:
        row = conn.execute(sql.replace("{p}", f'"{schema}".'), (run_id,)).fetchone()
    return row[0] if row else None


def status(root: Path, run_id: str) -> object:
    return column(root, "SELECT status FROM {p}run WHERE id = %s", run_id)


def driver(run_id: str, root: Path, procs: list[subprocess.Popen]) -> subprocess.Popen:
    """The worker process driving ``run_id`` (the driver table names its pid)."""
    pid = column(root, "SELECT pid FROM {p}driver WHERE run_id = %s", run_id)
    return next(proc for proc in procs if proc.pid == pid)


def outputs(root: Path, run_id: str) -> dict[str, str]:
    with open_store(root, "postgres") as store:
        run = store.open_run(run_id)
        return {b.name: run.read_binding(b.ref).value for b in run.bindings()}


def test_takeover_after_sigkill(root: Path, workers: list[subprocess.Popen]) -> None:
    run_id = enqueue(root)
    assert status(root, run_id) == "queued"
    procs = [worker(root, workers, f"w{i}") for i in (1, 2)]
    wait_for(lambda: started(root, "step B") == 1, "step B started", procs[0])
    assert status(root, run_id) == "running"
    (root / "s.yaml").write_text(script(hold_b=False))  # for whoever takes the run over
    killed = driver(run_id, root, procs)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    other = next(proc for proc in procs if proc is not killed)
    wait_for(lambda: status(root, run_id) == "completed", "the run completed", other)
    assert started(root, "step A") == 1  # committed before the kill: never run again
    assert started(root, "step B") == 2  # in flight at the kill: run again
    assert outputs(root, run_id) == {"a": "did A", "b": "did B", "o": "final"}


def test_a_run_waiting_on_the_database_holds_up_no_other(root: Path,
                                                         workers: list[subprocess.Popen]
                                                         ) -> None:
    """A worker drives each run on an event loop of its own: one run's state write waiting
    on PostgreSQL (its run row, locked here) leaves the worker's other runs going."""
    import psycopg

    (root / "s.yaml").write_text(script(hold_b=False))
    held, free = enqueue(root), enqueue(root)
    schema = os.environ["OPENPROSE_POSTGRES_SCHEMA"]
    with psycopg.connect(os.environ["OPENPROSE_POSTGRES_URL"]) as lock:  # one transaction
        lock.execute(f'SELECT 1 FROM "{schema}".run WHERE id = %s FOR UPDATE', (held,))
        proc = worker(root, workers, "w1", "--concurrency", "2")
        wait_for(lambda: status(root, free) == "completed", "the other run completed", proc)
        assert status(root, held) == "queued"  # its start still waits on the lock
    wait_for(lambda: status(root, held) == "completed", "the held run completed", proc)
    assert outputs(root, held) == outputs(root, free) == {"a": "did A", "b": "did B",
                                                           "o": "final"}


def test_sigterm_hands_runs_back(root: Path, workers: list[subprocess.Popen],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = enqueue(root)
    monkeypatch.setenv("OPENPROSE_WORKER_STOP_TIMEOUT", "0")
    procs = [worker(root, workers, f"w{i}") for i in (1, 2)]
    wait_for(lambda: started(root, "step B") == 1, "step B started", procs[0])
    (root / "s.yaml").write_text(script(hold_b=False))
    stopped = driver(run_id, root, procs)
    stopped.send_signal(signal.SIGTERM)
    assert stopped.wait(timeout=60) == 0
    other = next(proc for proc in procs if proc is not stopped)
    wait_for(lambda: status(root, run_id) == "completed", "the run completed", other)
    assert started(root, "step A") == 1
    log = (root / f"w{procs.index(stopped) + 1}.err").read_text()
    assert "Traceback" not in log and log.rstrip().endswith("stopped")


def test_cancel_queued_and_running(root: Path, workers: list[subprocess.Popen]) -> None:
    queued = enqueue(root)
    done = cli(root, "cancel", queued)
    assert done.exit_code == 0, done.output
    assert status(root, queued) == "interrupted"
    running = enqueue(root)
    proc = worker(root, workers, "w1")
    wait_for(lambda: started(root, "step B") == 1, "step B started", proc)
    done = cli(root, "cancel", running[:18])
    assert done.exit_code == 0, done.output
    wait_for(lambda: status(root, running) == "interrupted", "the run interrupted", proc)
    assert started(root, "step A") == 1  # the cancelled queued run never started
    again = cli(root, "cancel", running)
    assert again.exit_code == 1 and "neither queued nor driven" in again.output


def test_consent_is_the_one_given_at_enqueue(root: Path, workers: list[subprocess.Popen],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "p.prose").write_text('output o = session "run a command"\n')
    (root / "s.yaml").write_text("call_log: calls.jsonl\nsessions:\n  - match: command\n"
                                 "    tools:\n      - bash: echo hi\n")
    allowed = cli(root, "run", str(root / "p.prose"), "--state", "postgres", "--detach",
                  "--provider", "scripted", "--script", str(root / "s.yaml"), "--allow-bash")
    assert allowed.exit_code == 0, allowed.output
    refused = enqueue(root)
    monkeypatch.setenv("OPENPROSE_ALLOW_BASH", "1")  # the worker's own: never used
    proc = worker(root, workers, "w1")
    for run_id in (allowed.stdout.strip(), refused):
        wait_for(lambda run_id=run_id: status(root, run_id) == "completed",
                 "the runs completed", proc)
    assert outputs(root, allowed.stdout.strip())["o"].endswith("hi")
    assert "--allow-bash" in outputs(root, refused)["o"]


CAPPED = '''\
parallel:
  x = session "one"
  y = session "two"
  z = session "three"
'''


def test_session_cap_across_workers(root: Path, workers: list[subprocess.Popen],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "p.prose").write_text(CAPPED)
    (root / "s.yaml").write_text("latency: 0.05\ncall_log: calls.jsonl\n"
                                 "default_output: done\n")
    monkeypatch.setenv("OPENPROSE_MAX_SESSIONS_SCRIPTED", "1")
    runs = [enqueue(root), enqueue(root)]
    procs = [worker(root, workers, f"w{i}") for i in (1, 2)]
    for run_id in runs:
        wait_for(lambda run_id=run_id: status(root, run_id) == "completed",
                 "the runs completed", procs[0])
    in_flight = most = 0
    for call in calls(root):  # appended in order: a start after its slot, an end before
        in_flight += {"start": 1, "end": -1}.get(call["phase"], 0)
        most = max(most, in_flight)
    assert most == 1
    assert sum(1 for c in calls(root) if c["phase"] == "end") == 6


@pytest.mark.anyio
async def test_mcp_cancel_run_cancels_a_queued_run(root: Path) -> None:
    import anyio
    from mcp import Client

    from openprose.mcp_server.server import create_server

    run_id = await anyio.to_thread.run_sync(enqueue, root)
    async with Client(create_server(root, watch=False), mode="legacy") as client:
        result = await client.call_tool("cancel_run", {"run_id": run_id})
    assert not result.is_error, result.content[0].text
    assert result.structured_content == {"run_id": run_id, "status": "interrupted"}
    assert status(root, run_id) == "interrupted"


def test_detach_needs_postgres(tmp_path: Path) -> None:
    (tmp_path / "p.prose").write_text(PROGRAM)
    (tmp_path / "s.yaml").write_text(script(hold_b=False))
    done = cli(tmp_path, "run", str(tmp_path / "p.prose"), "--detach", "--provider",
               "scripted", "--script", str(tmp_path / "s.yaml"))
    assert done.exit_code == 2
    assert "--detach queues the run in PostgreSQL for workers: add --state postgres" in \
        done.output
    assert not (tmp_path / ".prose" / "runs").exists()


def test_a_database_made_before_queued_runs_takes_them(tmp_path: Path, pg_url: str,
                                                      pg_schema: str) -> None:
    import psycopg

    with open_store(tmp_path, "postgres", postgres_url=pg_url, schema=pg_schema):
        pass
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the constraint as it was
        conn.execute(f'ALTER TABLE "{pg_schema}".run DROP CONSTRAINT run_status_check')
        conn.execute(f'ALTER TABLE "{pg_schema}".run ADD CONSTRAINT run_status_check CHECK'
                     " (status IN ('running', 'completed', 'failed', 'interrupted'))")
    with open_store(tmp_path, "postgres", postgres_url=pg_url, schema=pg_schema) as store:
        run = store.create_run(PROGRAM, "p.prose", queued=True)
        assert run.status == "queued"


@pytest.mark.anyio
async def test_run_program_on_a_server_for_workers_queues_the_run(
        root: Path, workers: list[subprocess.Popen], monkeypatch: pytest.MonkeyPatch) -> None:
    import anyio
    from mcp import Client

    from openprose.engine.runner import run_settings
    from openprose.mcp_server.server import create_server

    (root / "s.yaml").write_text(script(hold_b=False))
    monkeypatch.setenv("OPENPROSE_ALLOW_NETWORK", "1")  # the server's consent and budget,
    monkeypatch.setenv("OPENPROSE_MAX_TOKENS", "100000")  # recorded with the run
    server = create_server(root, watch=False, backend="postgres", workers=True)
    async with Client(server, mode="legacy") as client:
        async def call(tool: str, **arguments: object) -> dict:
            result = await client.call_tool(tool, arguments)
            assert not result.is_error, result.content[0].text
            return dict(result.structured_content or {})

        program = {"program": "p.prose", "provider": "scripted", "script": "s.yaml"}
        first = await call("run_program", **program)
        assert (first["status"], status(root, first["run_id"])) == ("queued", "queued")
        assert (await call("get_run", run_id=first["run_id"]))["status"] == "queued"
        second = await call("run_program", **program)
        cancelled = await call("cancel_run", run_id=second["run_id"])
        assert cancelled["status"] == status(root, second["run_id"]) == "interrupted"
        refused = await client.call_tool("run_program", {**program, "state": "sqlite"})
        assert refused.is_error and "queues runs for workers" in refused.content[0].text
        assert calls(root) == []  # nothing ran in the server
        proc = worker(root, workers, "w1")
        await anyio.to_thread.run_sync(
            wait_for, lambda: status(root, first["run_id"]) == "completed",
            "the run completed", proc)
        done = await call("get_run", run_id=first["run_id"])
        assert done["status"] == "completed" and done["tokens"] > 0  # read afresh
        assert {o["name"] for o in done["outputs"]} == {"o"}
    assert started(root, "step A") == 1  # the cancelled run never started
    with open_store(root, "postgres") as store:
        recorded = run_settings(store.open_run(first["run_id"]))
    assert recorded["consent"] == {"bash": False, "network": True, "unsandboxed": False}
    assert recorded["max_tokens"] == 100000


def test_serve_for_workers_needs_postgres(tmp_path: Path) -> None:
    done = cli(tmp_path, "serve", "--workers")
    assert done.exit_code == 2
    assert "--workers (OPENPROSE_WORKERS) queues run_program's runs in PostgreSQL" in \
        done.output
