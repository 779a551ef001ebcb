"""A pool of `prose worker` processes on one PostgreSQL: throughput, and losing workers.

One command: ``python bench/cluster.py`` (the issue's sizes: 200 runs of 10 sessions at 200 ms
scripted latency, with 1, 2, 4 and 8 workers, then chaos with 4). Smaller:
``python bench/cluster.py --runs 40 --sessions 5 --workers 1,2,4 --chaos-runs 40``.
Needs OPENPROSE_POSTGRES_URL (or OPENPROSE_TEST_POSTGRES_URL; ``eval "$(scripts/pg-up)"``);
each phase uses a fresh schema, dropped afterwards.

Throughput: the workers start, and once every one takes runs the runs are queued (their
records first, then their jobs at once); runs per second from the first session's start to
the last run's end (the scripted call logs' times), and the most connections to the
database seen meanwhile (sampled every 0.2 s). And the CPU each session cost, from the
queuing to the last run's end: the workers' and the PostgreSQL server's (the postmaster and
its children, ended ones included, so the bench's own queuing and polling too; read from
/proc, so only for a server on this machine).
Unlike runs per second this does not depend on how loaded the machine is: at the
latency-bound ideal, sessions per second times CPU per session must fit in the cores.

Chaos: while the runs go, a random worker is SIGKILLed every few seconds and a new one
started. Then: every run completed; no session started again after its result was committed
(each run's call log); every run has all its bindings; take-over time per run that a killed
worker drove: from the kill to that run's next session start on another worker.

Replicas (``--replica-runs N``): two ``prose serve --http`` on one database; a host walks
each run through one of them, which is SIGKILLed while a session is live; the same client
goes on at the other with its tokens (never take_over). Then: sessions lost or repeated,
and the time from the kill to the next call the other replica accepted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-c", "from openprose.cli import main; main()"]


def program(sessions: int) -> str:
    return "".join(f'let s{i} = session "step {i}"\n' for i in range(sessions - 1)) + \
        'output o = session "final"\n'


def enqueue_all(root: Path, runs: int, sessions: int, latency: float) -> list[str]:
    """Queue ``runs`` runs, each with a script of its own (so a call log of its own)."""
    from openprose.engine import runner
    from openprose.engine.permissions import Grants
    from openprose.language import compile as compile_program
    from openprose.workers.queue import enqueue_all as enqueue

    source = program(sessions)
    (root / "p.prose").write_text(source)
    compiled = compile_program(source, "p.prose").program
    assert compiled is not None
    (root / "scripts").mkdir()
    jobs = []
    for i in range(runs):
        script = root / "scripts" / f"r{i}.yaml"
        script.write_text(f"latency: {latency}\ncall_log: r{i}.jsonl\ndefault_output: ok\n")
        job = runner.Job(source=source, file="p.prose", program=compiled, project_root=root,
                         backend="postgres")
        job.settings = {"provider": "scripted", "script": str(script), "max_concurrency": 16}
        jobs.append((job, Grants()))
    return [run_id for run_id, _ in enqueue(jobs)]


class Phase:
    """A project and a schema of its own; the workers it started."""

    def __init__(self, url: str, env: dict[str, str]) -> None:
        self.url = url
        self.schema = f"bench_{uuid.uuid4().hex[:12]}"
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name)
        self.env = {**os.environ, **env, "OPENPROSE_POSTGRES_URL": url,
                    "OPENPROSE_POSTGRES_SCHEMA": self.schema}
        os.environ.update({"OPENPROSE_POSTGRES_URL": url,
                           "OPENPROSE_POSTGRES_SCHEMA": self.schema})
        self.workers: list[subprocess.Popen] = []
        self.count = 0
        self.conn: Any = None

    def start(self, concurrency: int) -> subprocess.Popen:
        self.count += 1
        with open(self.root / f"w{self.count}.err", "w") as err:
            proc = subprocess.Popen([*CLI, "worker", "--concurrency", str(concurrency)],
                                    cwd=self.root, env=self.env, stdout=subprocess.DEVNULL,
                                    stderr=err)
        self.workers.append(proc)
        return proc

    def ready(self, proc: subprocess.Popen) -> bool:
        """Whether worker ``proc`` has started taking runs (it says so on stderr)."""
        name = f"w{self.workers.index(proc) + 1}.err"
        return "takes runs" in (self.root / name).read_text()

    def query(self, sql: str, *params: object) -> list[tuple]:
        """``sql`` on the bench's one connection (a new connection per poll would cost the
        server a process each time, counted as the workers' load)."""
        import psycopg

        if self.conn is None:
            self.conn = psycopg.connect(self.url, autocommit=True)
        cursor = self.conn.execute(sql.replace("{p}", f'"{self.schema}".'), params)
        return cursor.fetchall() if cursor.description is not None else []

    def postmaster(self) -> int | None:
        """The server's postmaster, when it runs on this machine (it is a backend's parent)."""
        backend = int(self.query("SELECT pg_backend_pid()")[0][0])
        try:
            stat = Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return int(stat[1])

    def done(self, ids: list[str]) -> int:
        rows = self.query("SELECT count(*) FROM {p}run WHERE status = 'completed'")
        return int(rows[0][0])

    def connections(self) -> int:
        """The connections to the database now, the bench's own (this query's) left out."""
        rows = self.query("SELECT count(*) - 1 FROM pg_stat_activity"
                          " WHERE datname = current_database()")
        return int(rows[0][0])

    def calls(self, i: int) -> list[dict]:
        log = self.root / "scripts" / f"r{i}.jsonl"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()
                if line.endswith("}")]

    def stop(self) -> float:
        """Stop the workers (SIGTERM); the CPU seconds they used."""
        used = 0.0
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                _, _, usage = os.wait4(proc.pid, 0)
                proc.returncode = 0
                used += usage.ru_utime + usage.ru_stime
        return used

    def close(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self.query(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        self.conn.close()
        self.tmp.cleanup()


def cpu_seconds(pid: int, children: bool = False) -> float:
    """CPU seconds process ``pid`` has used (with ``children``: and its ended, reaped
    children); 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = sum(int(f) for f in fields[11:15 if children else 13])  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def server_cpu(postmaster: int | None) -> float:
    """CPU seconds the PostgreSQL server has used: its postmaster, its children that ended
    (reaped by the postmaster) and those alive now."""
    if postmaster is None:
        return 0.0
    used = cpu_seconds(postmaster, children=True)
    for child in Path("/proc").iterdir():
        if child.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                stat = (child / "stat").read_text().rsplit(")", 1)[1].split()
                if int(stat[1]) == postmaster:
                    used += cpu_seconds(int(child.name))
    return used


def wait_all(phase: Phase, ids: list[str], limit: float, tick: object = None) -> None:
    deadline = time.monotonic() + limit
    while phase.done(ids) < len(ids):
        if time.monotonic() > deadline:
            raise SystemExit(f"only {phase.done(ids)} of {len(ids)} runs completed in "
                             f"{limit:.0f} s")
        if callable(tick):
            tick()
        time.sleep(0.2)


def throughput(url: str, args: argparse.Namespace, workers: int) -> None:
    phase = Phase(url, {})
    try:
        procs = [phase.start(args.concurrency) for _ in range(workers)]
        deadline = time.monotonic() + args.timeout
        while not all(phase.ready(proc) for proc in procs):  # start-up is not throughput
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise SystemExit("the workers did not start")
            time.sleep(0.2)
        postmaster = phase.postmaster()
        before = [cpu_seconds(p.pid) for p in procs], server_cpu(postmaster)
        ids = enqueue_all(phase.root, args.runs, args.sessions, args.latency)
        most = 0

        def count_connections() -> None:
            nonlocal most
            most = max(most, phase.connections())

        wait_all(phase, ids, args.timeout, count_connections)
        worker_cpu = sum(cpu_seconds(p.pid) for p in procs) - sum(before[0])
        pg_cpu = server_cpu(postmaster) - before[1]
        calls = [c for i in range(len(ids)) for c in phase.calls(i)]
        first = min(c["at"] for c in calls if c["phase"] == "start")
        last = max(c["at"] for c in calls if c["phase"] == "committed")
        took = last - first
        bound = args.latency * args.sessions
        cpu = phase.stop()
        print(f"  {workers} worker(s) x {args.concurrency}: {len(ids)} runs in {took:.1f} s = "
              f"{len(ids) / took:.2f} runs/s ({len(ids) * args.sessions / took:.1f} "
              f"sessions/s; latency-bound ideal {workers * args.concurrency / bound:.2f} "
              f"runs/s); workers' CPU, start-up included: {cpu / len(ids):.2f} s per run; "
              f"at most {most} connections ({most / workers:.1f} per worker)")
        sessions = len(ids) * args.sessions
        print(f"    CPU per session: {1000 * (worker_cpu + pg_cpu) / sessions:.2f} ms "
              f"(workers {1000 * worker_cpu / sessions:.2f}, PostgreSQL "
              f"{1000 * pg_cpu / sessions:.2f}"
              f"{'' if postmaster else ': not on this machine, not counted'})")
    finally:
        phase.close()


def chaos(url: str, args: argparse.Namespace) -> None:
    phase = Phase(url, {"OPENPROSE_WORKER_HEARTBEAT": str(args.heartbeat),
                        "OPENPROSE_WORKER_STALLED_AFTER": str(args.stalled_after)})
    rng = random.Random(args.seed)
    kills: list[tuple[float, list[str]]] = []  # (when, runs the killed worker drove)
    try:
        ids = enqueue_all(phase.root, args.chaos_runs, args.sessions, args.latency)
        for _ in range(args.chaos_workers):
            phase.start(args.concurrency)
        next_kill = time.monotonic() + args.kill_every

        def tick() -> None:
            nonlocal next_kill
            if time.monotonic() < next_kill:
                return
            ready = [p for p in phase.workers if p.poll() is None and phase.ready(p)]
            if not ready:  # none has started yet: a kill would test nothing
                return
            victim = rng.choice(ready)
            driven = [r for (r,) in phase.query(
                "SELECT d.run_id FROM {p}driver d JOIN {p}run r ON r.id = d.run_id"
                " WHERE d.pid = %s AND r.status = 'running'", victim.pid)]
            victim.send_signal(signal.SIGKILL)
            kills.append((time.time(), driven))
            victim.wait()
            phase.start(args.concurrency)
            next_kill = time.monotonic() + args.kill_every * rng.uniform(0.5, 1.5)

        started = time.monotonic()
        wait_all(phase, ids, args.timeout, tick)
        took = time.monotonic() - started
        index = {run_id: i for i, run_id in enumerate(ids)}
        twice = 0
        takeovers = []
        for i in range(len(ids)):
            committed: set[str] = set()
            for call in phase.calls(i):
                if call["phase"] == "committed":
                    committed.add(call["key"])
                elif call["phase"] == "start" and call["key"] in committed:
                    twice += 1
        handed = []
        for when, driven in kills:
            for run_id in driven:
                later = [c["at"] for c in phase.calls(index[run_id])
                         if c["phase"] == "start" and c["at"] > when]
                if later:
                    takeovers.append(min(later) - when)
                back = phase.query(
                    "SELECT extract(epoch FROM e.at) FROM {p}procrastinate_events e JOIN"
                    " {p}procrastinate_jobs j ON j.id = e.job_id WHERE j.queueing_lock = %s"
                    " AND e.type = 'deferred_for_retry' AND e.at > to_timestamp(%s)"
                    " ORDER BY e.at LIMIT 1", run_id, when)
                if back:
                    handed.append(float(back[0][0]) - when)
        bindings = phase.query("SELECT run_id, count(*) FROM {p}bindings GROUP BY run_id")
        lost = sum(1 for run_id in ids
                   if dict(bindings).get(run_id, 0) < args.sessions)
        done = phase.done(ids)
        print(f"  {len(ids)} runs, {args.chaos_workers} workers, {len(kills)} SIGKILLs "
              f"(about every {args.kill_every:g} s) in {took:.1f} s")
        print(f"  completed {done}/{len(ids)}; sessions started again after their commit: "
              f"{twice}; runs missing bindings: {lost}")
        print(f"  heartbeat {args.heartbeat:g} s, stalled after {args.stalled_after:g} s; "
              f"{len(takeovers)} runs were driven by a killed worker")
        for what, times in (("handed back to the queue", handed),
                            ("resumed by another worker (its next session start)", takeovers)):
            if times:
                print(f"  {what}: median {statistics.median(times):.2f} s, max "
                      f"{max(times):.2f} s after the kill")
    finally:
        phase.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--workers", default="1,2,4,8", help="worker counts, comma-separated")
    parser.add_argument("--concurrency", type=int, default=5, help="runs per worker at once")
    parser.add_argument("--chaos-runs", type=int, default=200, help="0: no chaos phase")
    parser.add_argument("--chaos-workers", type=int, default=4)
    parser.add_argument("--kill-every", type=float, default=3.0, help="seconds, about")
    parser.add_argument("--heartbeat", type=float, default=1.0)
    parser.add_argument("--stalled-after", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--replica-runs", type=int, default=5,
                        help="host-walked runs whose replica is killed; 0: no replica phase")
    args = parser.parse_args()
    url = os.environ.get("OPENPROSE_POSTGRES_URL") or os.environ.get(
        "OPENPROSE_TEST_POSTGRES_URL")
    if not url:
        raise SystemExit("set OPENPROSE_POSTGRES_URL (eval \"$(scripts/pg-up)\")")
    print(f"{args.runs} runs x {args.sessions} sessions at {args.latency:g} s each")
    for count in (int(n) for n in args.workers.split(",") if n):
        throughput(url, args, count)
    if args.chaos_runs:
        print(f"chaos: {args.chaos_runs} runs x {args.sessions} sessions")
        chaos(url, args)
    if args.replica_runs:
        print("replicas: two `prose serve --http` on one database, one killed per run")
        replicas(url, args)


# --------------------------------------------------------------------- replicas

REPLICA_TOKEN = "bench-replica-token-0123456789"


def replica(phase: Phase, n: int) -> tuple[subprocess.Popen, str]:
    """A `prose serve --http` of ``phase``'s project on a free port, and its URL once it
    listens (it says so on stderr) and has answered a first call."""
    log = phase.root / f"replica{n}.err"
    with open(log, "w") as err:
        proc = subprocess.Popen([*CLI, "serve", "--project", str(phase.root), "--http", "0",
                                 "--state", "postgres"], cwd=phase.root, env=phase.env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    phase.workers.append(proc)
    while True:
        found = re.search(r"http://127\.0\.0\.1:\d+/mcp", log.read_text())
        if found:
            asyncio.run(warm(found.group(0)))
            return proc, found.group(0)
        if proc.poll() is not None:
            raise SystemExit(f"prose serve --http ended: {log.read_text()}")
        time.sleep(0.05)


async def warm(url: str) -> None:
    """One call to a new replica (as one in service has had): it opens its store."""
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"authorization": f"Bearer {REPLICA_TOKEN}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
            Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
        await client.call_tool("list_runs", {})


async def walk(first: tuple[subprocess.Popen, str], second: str, sessions: int,
               kill_at: int) -> tuple[str, float, float, int, list[float]]:
    """A host walks a run of ``sessions`` sessions through replica ``first``, which is
    SIGKILLed while session ``kill_at`` is live; the same client (its VM and session tokens)
    goes on at ``second``, never with take_over. Returns the run id, the seconds from the
    kill to the first call accepted there and to its MCP session there, the calls refused
    before it, and how long each write_binding took at the first replica."""
    # run as a script, this folder leads sys.path, and its mcp.py would shadow the SDK
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    logging.getLogger("mcp").setLevel(logging.ERROR)  # closing the dead replica's session

    async def call(client: Client, tool: str, **arguments: object) -> dict:
        result = await client.call_tool(tool, arguments)
        if result.is_error:
            raise RuntimeError(f"{tool}: {result.content[0].text}")
        return dict(result.structured_content or {})

    async def step(client: Client, vm: str, i: int) -> dict:
        prompt = "final" if i == sessions - 1 else f"step {i}"
        return await call(client, "spawn_session", vm_token=vm, statement=str(i), prompt=prompt)

    proc, url = first
    headers = {"authorization": f"Bearer {REPLICA_TOKEN}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
            Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
        run = await call(client, "start_run", program="p.prose", backend="postgres")
        vm = run["vm_token"]
        writes = []
        for i in range(kill_at):
            spawned = await step(client, vm, i)
            began = time.monotonic()
            await call(client, "write_binding", token=spawned["session_token"], value=f"v{i}")
            writes.append(time.monotonic() - began)
        live = await step(client, vm, kill_at)
        proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        proc.wait()
    refused = 0
    while True:  # the load balancer now sends this client to the other replica
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
                Client(streamable_http_client(second, http_client=http),
                       mode="legacy") as client:
            opened = time.monotonic() - killed
            try:
                await call(client, "write_binding", token=live["session_token"],
                           value=f"v{kill_at}")
            except RuntimeError as err:
                refused += 1
                if refused == 1:
                    print(f"    refused at the other replica: {err}")
                if time.monotonic() - killed > 120:
                    raise SystemExit("the other replica never took the run") from None
                await asyncio.sleep(0.05)
                continue
            took = time.monotonic() - killed
            for i in range(kill_at + 1, sessions):
                spawned = await step(client, vm, i)
                await call(client, "write_binding", token=spawned["session_token"],
                           value=f"v{i}")
            await call(client, "complete_run", vm_token=vm)
            return run["run_id"], took, opened, refused, writes


def replicas(url: str, args: argparse.Namespace) -> None:
    """Two replicas on one database; per run, the one a host walks it through is killed
    mid-run and a new one started in its place."""
    from openprose.state import open_store

    phase = Phase(url, {"OPENPROSE_MCP_TOKEN": REPLICA_TOKEN})
    phase.env["HOME"] = str(phase.root)
    rng = random.Random(args.seed)
    sessions = max(args.sessions, 2)
    try:
        (phase.root / "p.prose").write_text(program(sessions))
        live = [replica(phase, 1), replica(phase, 2)]
        took, opened, writes, refused, lost, repeated, done = [], [], [], 0, 0, 0, 0
        for n in range(args.replica_runs):
            run_id, seconds, session, turned_away, written = asyncio.run(
                walk(live[0], live[1][1], sessions, rng.randrange(sessions)))
            took.append(seconds)
            opened.append(session)
            writes += written
            refused += turned_away
            with open_store(phase.root, "postgres", home=phase.root) as store:
                run = store.open_run(run_id)
                done += run.status == "completed"
                bound = {b.name for b in run.bindings()}
                lost += sessions - len(bound)
                spawned = [e.key for e in run.journal_entries() if e.kind == "intent"
                           and e.key.startswith("mcp:") and "#" in e.key]
                repeated += len(spawned) - len(set(spawned))
            live = [live[1], replica(phase, n + 3)]
        print(f"  {args.replica_runs} runs x {sessions} sessions walked by a host, the "
              f"replica it used SIGKILLed mid-session each time")
        print(f"  completed {done}/{args.replica_runs}; sessions lost: {lost}; sessions "
              f"repeated: {repeated}; calls refused at the other replica: {refused} "
              f"(no take_over given)")
        for what, times in (("the client's MCP session opened at the other replica", opened),
                            ("its next call accepted there", took)):
            print(f"  kill to {what}: median {statistics.median(times):.2f} s, max "
                  f"{max(times):.2f} s")
        if writes:
            print(f"  (a write_binding before the kill: median "
                  f"{statistics.median(writes):.2f} s, max {max(writes):.2f} s)")
    finally:
        phase.close()


if __name__ == "__main__":
    main()
