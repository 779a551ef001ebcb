"""State benchmark (issue 3, item 5).

    python bench/state.py [--writes 1000] [--threads 64] [--backends filesystem,sqlite,postgres]

One *write* is what a finished session costs the state layer with the default durability:
grant a session capability, the session writes its binding, then the binding, its result
record and the ended token are committed as one durable step. Printed per backend: latency
(median and 99th percentile) and writes/s, once one write after another and once from 64
threads at the same time. PostgreSQL runs when OPENPROSE_POSTGRES_URL (or
OPENPROSE_TEST_POSTGRES_URL) is set; each run uses a throwaway schema.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from openprose.state import BindingRef, Run, StateStore, open_store

VALUE = "x" * 100


def _postgres_url() -> str | None:
    return os.environ.get("OPENPROSE_POSTGRES_URL") or os.environ.get(
        "OPENPROSE_TEST_POSTGRES_URL")


def _one_write(store: StateStore, run: Run, name: str) -> float:
    started = time.perf_counter()
    source = f'let {name} = session "bench"'
    grant = run.grant_session(BindingRef(name), "let", source)
    store.session(grant.token).write_output(VALUE)
    run.complete_session(grant.token, key=name, input_hash="h")
    return time.perf_counter() - started


def _sequential(store: StateStore, run: Run, writes: int) -> tuple[list[float], float]:
    started = time.perf_counter()
    latencies = [_one_write(store, run, f"s{i}") for i in range(writes)]
    return latencies, time.perf_counter() - started


def _concurrent(store: StateStore, run: Run, writes: int,
                threads: int) -> tuple[list[float], float]:
    latencies: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads + 1)

    def worker(index: int) -> None:
        mine = []
        barrier.wait()
        for i in range(index, writes, threads):
            mine.append(_one_write(store, run, f"c{i}"))
        with lock:
            latencies.extend(mine)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - started
    if len(latencies) != writes:
        raise SystemExit(f"only {len(latencies)} of {writes} concurrent writes finished")
    return latencies, elapsed


def _report(backend: str, mode: str, latencies: list[float], elapsed: float) -> None:
    ordered = sorted(latencies)
    p50 = statistics.median(ordered) * 1e3
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3
    print(f"{backend:<11} {mode:<14} {p50:>9.3f} {p99:>9.3f} {len(ordered) / elapsed:>10.0f}")


def bench(backend: str, writes: int, threads: int) -> None:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = open_store(root, backend, home=root / "home", postgres_url=_postgres_url(),
                           schema=schema)
        try:
            run = store.create_run('let x = session "bench"\n', "bench.prose")
            _report(backend, "sequential", *_sequential(store, run, writes))
            _report(backend, f"{threads} threads", *_concurrent(store, run, writes, threads))
            missing = writes * 2 - len(run.bindings())
            if missing:
                raise SystemExit(f"{backend}: {missing} bindings missing after the benchmark")
        finally:
            store.close()
            if backend == "postgres":
                import psycopg

                with psycopg.connect(_postgres_url() or "", autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--backends", default="filesystem,sqlite,postgres")
    args = parser.parse_args()
    backends = args.backends.split(",")
    if "postgres" in backends and not _postgres_url():
        print("postgres: skipped (set OPENPROSE_POSTGRES_URL)")
        backends.remove("postgres")
    print(f"{args.writes} session writes (grant, write binding, durable commit), "
          f"100-byte values")
    print(f"{'backend':<11} {'mode':<14} {'p50 ms':>9} {'p99 ms':>9} {'writes/s':>10}")
    for backend in backends:
        bench(backend, args.writes, args.threads)


if __name__ == "__main__":
    main()
