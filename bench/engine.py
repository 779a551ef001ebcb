"""Engine benchmark (issue 4, item 5).

    python bench/engine.py [--sessions 1000] [--backends filesystem,sqlite,postgres] [--repeats 5]

Prints, per backend: the per-statement overhead of N sequential sessions on a zero-latency
scripted provider with the default durability (each session's binding and result record
durable before the next statement), the same at N/10 statements (the cost must not grow with
program length), the marginal cost of one more statement (fixed start-up left out), and the
size of the state the N-session run leaves with 100-byte outputs, and the benchmark process's
CPU time per statement at N (the engine's own work: on a loaded machine the wall time is mostly
waiting for the disk and the other processes). Each is the median of
``--repeats`` runs, with their range.
Then, per backend, the wall time of a ``parallel for`` over 1,000 items at 100 ms latency and
concurrency 100, as a ratio to the ideal 1.0 s: of the statement (from its start until the next
statement starts, every session's result committed) and of the whole run (creating and
finishing the run too). PostgreSQL runs when OPENPROSE_POSTGRES_URL (or
OPENPROSE_TEST_POSTGRES_URL) is set, in a throwaway schema.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from openprose.engine import runner
from openprose.engine.events import Event
from openprose.engine.interpreter import Options
from openprose.engine.scripted import ScriptedProvider
from openprose.language import compile_or_raise

OUTPUT = "x" * 100


def _sequential(n: int) -> str:
    return "\n".join(f'let v{i} = session "step {i}"' for i in range(n)) + "\n"


def _fan_out(n: int) -> str:
    """The ``parallel for`` is line 2; line 4 starts once it is done (its sessions committed)."""
    items = ", ".join(str(i) for i in range(n))
    return (f'let xs = [{items}]\nparallel for x in xs:\n  session "item {{x}}"\n'
            'let done = "yes"\n')


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def _run(source: str, root: Path, backend: str, script: dict, concurrency: int = 16,
               reached: dict[int, float] | None = None):
    """Run ``source``; seconds from start to finish. ``reached`` gets the time each top-level
    line's statement started."""
    program = compile_or_raise(source, "bench.prose")
    job = runner.Job(source=source, file="bench.prose", program=program, project_root=root,
                     backend=backend, max_concurrency=concurrency,
                     options=Options(max_concurrency=concurrency))

    def listen(event: Event) -> None:
        if reached is not None and event.kind == "statement":
            reached.setdefault(event.line, time.perf_counter())

    started = time.perf_counter()
    outcome = await runner.execute(job, ScriptedProvider(script), listen)
    elapsed = time.perf_counter() - started
    if outcome.status != "completed":
        raise SystemExit(f"benchmark run failed: {outcome.error}")
    return elapsed, outcome


# Every measurement's project lives under one directory, removed when the benchmark ends:
# deleting thousands of files between measurements would slow down the next one.
WORK = Path(tempfile.mkdtemp(prefix="openprose-bench-"))


def _project() -> Path:
    """A fresh project directory, after flushing what earlier measurements left dirty."""
    os.sync()
    time.sleep(0.5)
    return Path(tempfile.mkdtemp(dir=WORK))


def sequential(backend: str, n: int) -> tuple[float, float, int]:
    """Seconds per statement for ``n`` sequential sessions, this process's CPU seconds per
    statement, and the state's size in bytes."""
    root = _project()
    cpu = time.process_time()
    elapsed, _ = asyncio.run(_run(_sequential(n), root, backend, {"default_output": OUTPUT}))
    cpu = time.process_time() - cpu
    size = _size(root / ".prose") if backend != "postgres" else -1
    return elapsed / n, cpu / n, size


def fan_out(backend: str = "filesystem", n: int = 1000, latency: float = 0.1,
            concurrency: int = 100) -> tuple[float, float]:
    """Wall time over the ideal: of the ``parallel for`` statement (from its start until the
    next statement starts), and of the whole run (creating and finishing the run included)."""
    reached: dict[int, float] = {}
    elapsed, _ = asyncio.run(_run(_fan_out(n), _project(), backend,
                                  {"default_output": OUTPUT, "latency": latency},
                                  concurrency, reached))
    ideal = n / concurrency * latency
    return (reached[4] - reached[2]) / ideal, elapsed / ideal


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--backends", default="filesystem,sqlite,postgres")
    parser.add_argument("--repeats", type=int, default=5,
                        help="runs of each measurement per backend")
    args = parser.parse_args()
    backends = args.backends.split(",")
    if "postgres" in backends and not (os.environ.get("OPENPROSE_POSTGRES_URL")
                                       or os.environ.get("OPENPROSE_TEST_POSTGRES_URL")):
        print("postgres: skipped (set OPENPROSE_POSTGRES_URL)")
        backends.remove("postgres")
    if os.environ.get("OPENPROSE_TEST_POSTGRES_URL") and not os.environ.get(
            "OPENPROSE_POSTGRES_URL"):
        os.environ["OPENPROSE_POSTGRES_URL"] = os.environ["OPENPROSE_TEST_POSTGRES_URL"]
    if "postgres" in backends:  # a throwaway schema, dropped at the end
        os.environ["OPENPROSE_POSTGRES_SCHEMA"] = f"bench_{uuid.uuid4().hex[:10]}"
    try:
        _measure(backends, args.sessions, args.repeats)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
        if "postgres" in backends:
            import psycopg

            with psycopg.connect(os.environ["OPENPROSE_POSTGRES_URL"], autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{os.environ["OPENPROSE_POSTGRES_SCHEMA"]}"'
                             " CASCADE")


def _measure(backends: list[str], sessions: int, repeats: int) -> None:
    n, small = sessions, max(1, sessions // 10)
    print(f"sequential sessions, ms per statement (median of {repeats} runs, range in brackets)")
    print(f"{'backend':<11} {'@' + str(n):>22} {'@' + str(small):>22} {'marginal':>9} "
          f"{'state size':>11} {'cpu @' + str(n):>10}")
    for backend in backends:
        big, small_runs, cpu, size = [], [], [], -1
        for _ in range(repeats):
            per_big, per_cpu, size = sequential(backend, n)
            big.append(per_big * 1e3)
            cpu.append(per_cpu * 1e3)
            small_runs.append(sequential(backend, small)[0] * 1e3)
        per_big, per_small = statistics.median(big), statistics.median(small_runs)
        # What one more statement costs, without the run's fixed start and finish.
        marginal = (per_big * n - per_small * small) / (n - small) if n > small else per_big
        shown = f"{size / 1e6:.2f} MB" if size >= 0 else "(in db)"
        print(f"{backend:<11} {_spread(big, ''):>22} {_spread(small_runs, ''):>22} "
              f"{marginal:>9.3f} {shown:>11} {statistics.median(cpu):>10.3f}")
    print(f"parallel for: 1,000 items × 100 ms at concurrency 100, wall time / ideal 1.0 s "
          f"(median of {repeats} runs, range in brackets)")
    print(f"{'backend':<11} {'statement':>22} {'whole run':>22}")
    for backend in backends:
        runs = [fan_out(backend) for _ in range(repeats)]
        print(f"{backend:<11} {_spread([r[0] for r in runs]):>22} "
              f"{_spread([r[1] for r in runs]):>22}")


def _spread(values: list[float], unit: str = "×") -> str:
    return f"{statistics.median(values):.3f}{unit} [{min(values):.3f}–{max(values):.3f}]"


if __name__ == "__main__":
    main()
