"""Front-end speed: ``python bench/compile.py``.

1. Throughput of ``openprose.language.compile`` (lex + parse + validate) over the corpus
   programs, repeated until at least ``--mb`` megabytes (default 5) have been compiled.
   Target: >= 1 MB/s.
2. Cold-start wall time of ``prose compile <one corpus file>`` as a subprocess (best and median
   of ``--runs`` runs), using the ``prose`` executable next to ``sys.executable``.
   Target: <= 0.3 s.

Prints the numbers; makes no assertions about them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import CORPUS  # noqa: E402

SKETCH = CORPUS / "roadmap" / "syntax" / "open-prose-syntax.prose"


def corpus_files() -> list[Path]:
    return sorted(p for p in CORPUS.rglob("*.prose") if p != SKETCH)


def throughput(files: list[Path], min_mb: float) -> None:
    from openprose.language import compile

    sources = [(str(p), p.read_text(encoding="utf-8")) for p in files]
    corpus_bytes = sum(len(src.encode("utf-8")) for _, src in sources)
    repeats = max(1, -(-int(min_mb * 1e6) // corpus_bytes))
    for path, src in sources:  # warm up (imports, regex compilation)
        compile(src, path)
    errors = 0
    start = time.perf_counter()
    for _ in range(repeats):
        for path, src in sources:
            errors += len(compile(src, path).errors)
    elapsed = time.perf_counter() - start
    total_mb = corpus_bytes * repeats / 1e6
    rate = total_mb / elapsed
    print(f"throughput: {len(sources)} files, {corpus_bytes / 1e3:.0f} kB x {repeats} = "
          f"{total_mb:.2f} MB in {elapsed:.2f} s -> {rate:.2f} MB/s "
          f"(target >= 1 MB/s: {'met' if rate >= 1 else 'NOT met'})")
    if errors:
        print(f"  warning: {errors} errors reported while compiling the corpus")


def cold_start(target: Path, runs: int) -> None:
    prose = Path(sys.executable).with_name("prose.exe" if os.name == "nt" else "prose")
    if not prose.exists():
        print(f"cold start: no 'prose' executable at {prose} (install the project first)")
        return
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run([str(prose), "compile", str(target)], capture_output=True,
                              text=True, check=False)
        times.append(time.perf_counter() - start)
        if proc.returncode not in (0, 1):
            print(f"cold start: prose compile exited {proc.returncode}: {proc.stderr.strip()}")
            return
    best, median = min(times), statistics.median(times)
    print(f"cold start: prose compile {target.name}: best {best:.3f} s, median {median:.3f} s "
          f"over {runs} runs (target <= 0.3 s: {'met' if median <= 0.3 else 'NOT met'}; "
          f"exit {proc.returncode})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=5.0, help="megabytes to compile (>= 5)")
    parser.add_argument("--runs", type=int, default=10, help="cold-start runs")
    parser.add_argument("--file", type=Path, default=None,
                        help="file for the cold-start run (default: the largest corpus program)")
    args = parser.parse_args(argv)
    if not CORPUS.is_dir():
        print(f"corpus not found at {CORPUS}")
        return 2
    files = corpus_files()
    print(f"python {sys.version.split()[0]} on {os.cpu_count()} CPUs; corpus {CORPUS}")
    throughput(files, args.mb)
    target = args.file or max(files, key=lambda p: p.stat().st_size)
    cold_start(target, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
