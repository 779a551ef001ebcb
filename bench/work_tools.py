"""What the permission checks and the sandbox cost a session: ``python bench/work_tools.py``.

1. One permission decision on a write path against a glob (``openprose.engine.permissions``),
   averaged over ``--checks`` calls.
2. One shell command (``true``) through the sandbox this machine offers, and unconfined for
   comparison, averaged over ``--runs`` calls after one warm-up call.
3. The file tools against a thread that keeps swapping ``docs/f`` between a file and a
   link to ``/proc/self/environ`` (and ``docs/w`` to ``.git/config``): ``--races`` reads and
   writes, the time per read, how many met a link (refused) and how many leaked (must be 0).

Prints the numbers; makes no assertions about them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import threading
import time
from pathlib import Path

from openprose.engine import sandbox
from openprose.engine.permissions import Permissions, Policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--races", type=int, default=2000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-work-"))
    (root / "src").mkdir()
    gate = Policy(root).gate("bench", Permissions(write=("src/**",)))
    started = time.perf_counter()
    for i in range(args.checks):
        gate.path(f"src/f{i}.py", write=True)
    per = (time.perf_counter() - started) / args.checks
    print(f"permission check (write, glob): {per * 1e6:.1f} us/call")

    async def commands() -> None:
        for box in (sandbox.detect(), sandbox.Sandbox("none")):
            await sandbox.run(box, "true", project=root, write_roots=[root / "src"],
                              network=False)
            started = time.perf_counter()
            for _ in range(args.runs):
                await sandbox.run(box, "true", project=root, write_roots=[root / "src"],
                                  network=False)
            per = (time.perf_counter() - started) / args.runs
            print(f"command 'true', sandbox {box.kind}: {per * 1e3:.1f} ms/call")

    asyncio.run(commands())
    race(root, args.races)


def race(root: Path, count: int) -> None:
    from openprose.engine.work_tools import WorkSetup

    docs = root / "docs"
    docs.mkdir()
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    stop = threading.Event()

    def swapper() -> None:
        while not stop.is_set():
            for name, target in (("f", "/proc/self/environ"), ("w", "../.git/config")):
                spare = docs / f".{name}.spare"
                spare.unlink(missing_ok=True)
                spare.symlink_to(target)
                os.replace(spare, docs / name)
                spare.write_text("plain\n")
                os.replace(spare, docs / name)

    records: list = []
    tools = WorkSetup(Policy(root)).tools(
        Policy(root).gate("bench", Permissions(write=("docs/**",))), records.append)
    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    leaks = 0

    async def calls() -> float:
        nonlocal leaks
        started = time.perf_counter()
        for i in range(count):
            text, _ = await tools.call("read", {"file_path": "docs/f"})
            leaks += "PATH=" in text
            await tools.call("write", {"file_path": "docs/w", "content": f"{i}\n"})
        return time.perf_counter() - started

    try:
        elapsed = asyncio.run(calls())
    finally:
        stop.set()
        thread.join()
    leaks += (root / ".git" / "config").read_text() != "[core]\n"
    met = sum(1 for r in records if r.rule == "a link appeared on the path after its check")
    print(f"race: {count} reads + {count} writes in {elapsed:.2f} s "
          f"({elapsed / (2 * count) * 1e3:.2f} ms/call); {met} met a link after the check "
          f"and were refused; leaks: {leaks}")


if __name__ == "__main__":
    main()
