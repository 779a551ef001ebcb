"""What the permission checks and the sandbox cost a session: ``python bench/work_tools.py``.

1. One permission decision on a write path against a glob (``openprose.engine.permissions``),
   averaged over ``--checks`` calls.
2. One shell command (``true``) through the sandbox this machine offers, and unconfined for
   comparison, averaged over ``--runs`` calls after one warm-up call.

Prints the numbers; makes no assertions about them.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from openprose.engine import sandbox
from openprose.engine.permissions import Permissions, Policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=20)
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


if __name__ == "__main__":
    main()
