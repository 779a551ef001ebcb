"""`prose ui` benchmark: page-load time of a 20,000-session run, and the live delay.

    python bench/ui.py [--backends filesystem,sqlite] [--repeats 5] [--sessions 20 --latency 0.2]

1. Corpus 28 (gas-town: its two patrol loops run 1,000 rounds each, about 19,000 sessions)
   run on the scripted provider, per backend; then the
   server's time for the runs page and the run page on their first visit, then for the runs
   page, the run page, its last sessions page, the live fragment the page fetches on each
   change and one binding's value (median and range of ``--repeats``), and, with
   Playwright and /usr/bin/chromium present, a browser's time from navigation to the run
   page's load event against a fresh `prose ui` (its first visit, then the others), and
   where the first visit's time went (the browser's navigation timing: the server's first
   byte, DOMContentLoaded, first contentful paint, load). The machine's load average is
   printed beside.
2. Live delay: a `prose run` of ``--sessions`` sequential sessions (``--latency`` seconds
   each) followed by the run page's event stream of a `prose ui` process; per change event,
   the time since the newest journal record it reports: median and maximum.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from starlette.testclient import TestClient

from openprose.engine import runner
from openprose.engine.interpreter import Options
from openprose.engine.scripted import ScriptedProvider
from openprose.language import compile_or_raise
from openprose.state import open_store
from openprose.ui import create_app

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.conftest import CORPUS  # noqa: E402
from tests.engine.kill_sweep import CORPUS_SCRIPT  # noqa: E402

PROSE = str(Path(sys.executable).with_name("prose"))
TOKEN = "bench"
CHROMIUM = "/usr/bin/chromium"


async def _no_sleep(seconds: float) -> None:
    return None


def build(root: Path, backend: str) -> tuple[str, int, float]:
    """Run corpus 28 into ``root``: the run id, its sessions and the seconds it took."""
    path = CORPUS / "28-gas-town.prose"
    source = path.read_text(encoding="utf-8")
    program = compile_or_raise(source, str(path))
    script = {**CORPUS_SCRIPT, "latency": 0.0}  # both patrol loops run their 1,000 rounds
    job = runner.Job(source=source, file=str(path), program=program, project_root=root,
                     backend=backend, max_concurrency=16,
                     inputs={decl.name: f"sample {decl.name}" for decl in program.inputs},
                     imports=runner.load_imports(program, str(path), root),
                     options=Options(sleep=_no_sleep, max_concurrency=16))
    started = time.perf_counter()
    outcome = asyncio.run(runner.execute(job, ScriptedProvider(script)))
    return outcome.run_id, outcome.sessions, time.perf_counter() - started


def _timed(client: TestClient, url: str, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise SystemExit(f"{url}: {response.status_code} {response.text[:200]}")
    return times


def _line(label: str, times: list[float]) -> str:
    return (f"  {label:<26} median {statistics.median(times) * 1000:7.0f} ms  "
            f"(range {min(times) * 1000:.0f}-{max(times) * 1000:.0f} ms)")


def page_loads(backend: str, repeats: int, project: Path | None) -> None:
    root = project or Path(tempfile.mkdtemp(prefix="openprose-bench-ui-"))
    try:
        if project is None:
            run_id, sessions, took = build(root, backend)
            print(f"{backend}: corpus 28 run {run_id}: {sessions:,} sessions "
                  f"(built in {took:.0f} s)")
        else:
            with open_store(root, backend) as store:
                run_id = max(store.list_runs(), key=lambda info: info.started).id
            print(f"{backend}: run {run_id} of {root}")
        store = open_store(root, backend)
        try:
            client = TestClient(create_app([store], TOKEN, 8000),
                                base_url="http://127.0.0.1:8000")
            started = time.perf_counter()
            client.get("/?token=" + TOKEN, follow_redirects=False)
            client.get("/")
            print(f"  runs page, first visit: {time.perf_counter() - started:.2f} s")
            started = time.perf_counter()
            page = client.get(f"/runs/{run_id}")
            print(f"  run page, first visit: {time.perf_counter() - started:.2f} s")
            print(f"  run page: {len(page.content) / 1024:.0f} kB of HTML, "
                  f"{page.text.count('<')} tags")
            binding = next(b for b in store.backend.list_bindings(run_id))
            for label, url in [
                    ("runs page", "/"),
                    ("run page", f"/runs/{run_id}"),
                    ("run page, sessions p.400", f"/runs/{run_id}?spage=400"),
                    ("live fragment", f"/runs/{run_id}?part=live"),
                    ("binding value", f"/runs/{run_id}/bindings/{binding.name}"
                                      + (f"?eid={binding.execution_id}"
                                         if binding.execution_id else ""))]:
                print(_line(label, _timed(client, url, repeats)))
            browser, timing = _browser_load(root, backend, run_id, repeats)
            if browser:
                print(f"  browser: run page loaded, first visit: {browser[0]:.2f} s")
                print("  browser: first visit's " + ", ".join(
                    f"{name} at {timing[key]:.0f} ms" for name, key in [
                        ("first byte", "responseStart"), ("DOMContentLoaded",
                                                          "domContentLoadedEventEnd"),
                        ("first paint", "paint"), ("load", "loadEventEnd")]
                    if timing.get(key) is not None))  # no paint recorded before load: none
                print(_line("browser: run page loaded", browser[1:]))
        finally:
            store.close()
    finally:
        if project is None:
            shutil.rmtree(root, ignore_errors=True)


def _browser_load(root: Path, backend: str, run_id: str, repeats: int
                  ) -> tuple[list[float], dict[str, float]]:
    """Navigation to load event in chromium, against a real `prose ui` (empty without one):
    the first visit, then ``repeats`` more; and the first visit's navigation timing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return [], {}
    if not Path(CHROMIUM).exists():
        return [], {}
    server = subprocess.Popen([PROSE, "ui", "--project", str(root), "--state", backend],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = server.stdout.readline().strip()
        base = url.split("?")[0]
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"])
            page = browser.new_page()
            page.goto(url, timeout=600_000)
            times, timing = [], {}  # the first: the server has not read the run before
            for _ in range(repeats + 1):
                started = time.perf_counter()
                page.goto(f"{base}runs/{run_id}", wait_until="load", timeout=600_000)
                times.append(time.perf_counter() - started)
                timing = timing or page.evaluate(
                    "() => ({...performance.getEntriesByType('navigation')[0].toJSON(), paint:"
                    " performance.getEntriesByName('first-contentful-paint')[0]?.startTime"
                    " ?? null})")
            browser.close()
        return times, timing
    finally:
        server.terminate()
        server.communicate(timeout=30)


def live_delays(backend: str, sessions: int, latency: float) -> None:
    root = Path(tempfile.mkdtemp(prefix="openprose-bench-ui-"))
    try:
        (root / "p.prose").write_text("".join(f'let s{i} = session "Step {i}"\n'
                                              for i in range(sessions)))
        (root / "s.yaml").write_text(f"default_output: ok\nlatency: {latency}\n")
        server = subprocess.Popen([PROSE, "ui", "--project", str(root), "--state", backend],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        url = server.stdout.readline().strip()
        base = url.split("?")[0].rstrip("/")
        driver = subprocess.Popen([PROSE, "run", "p.prose", "--provider", "scripted",
                                   "--script", "s.yaml", "--state", backend], cwd=root,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        run_id = driver.stderr.readline().split()[1]
        store = open_store(root, backend)
        found = []
        try:
            with httpx.Client(base_url=base, timeout=60) as client:
                client.get("/?token=" + url.split("token=")[1])
                with client.stream("GET", f"/runs/{run_id}/events") as events:
                    for line in events.iter_lines():
                        if line.startswith("event: end"):
                            break
                        if not line.startswith("event: change"):
                            continue
                        arrived = time.time()
                        stamps = [e.meta.get("at") for e in store.read_journal(run_id)]
                        newest = max((s for s in stamps if s), default=None)
                        if newest is not None:
                            found.append(arrived - newest)
        finally:
            store.close()
            driver.communicate(timeout=120)
            server.terminate()
            server.communicate(timeout=30)
        found = found[1:]  # the first event reports the state found on connecting
        print(f"{backend}: live delay over {len(found)} change events: median "
              f"{statistics.median(found) * 1000:.0f} ms, max {max(found) * 1000:.0f} ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="filesystem,sqlite")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--project", type=Path,
                        help="measure the newest run of this project instead of building one")
    parser.add_argument("--no-live", action="store_true", help="skip the live delay")
    args = parser.parse_args()
    if not (CORPUS / "28-gas-town.prose").is_file():
        raise SystemExit(f"corpus not found at {CORPUS} (set OPENPROSE_CORPUS)")
    for backend in args.backends.split(","):
        print(f"load average {' '.join(f'{n:.1f}' for n in os.getloadavg())}")
        page_loads(backend, args.repeats, args.project)
        print(f"load average {' '.join(f'{n:.1f}' for n in os.getloadavg())}")
    for backend in [] if args.no_live else args.backends.split(","):
        live_delays(backend, args.sessions, args.latency)


if __name__ == "__main__":
    main()
