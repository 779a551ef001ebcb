"""Long fuzz run of the language front end: ``python bench/fuzz.py --cases 200000``.

Uses the generators of tests/language/prose_fuzzgen.py (random text, token soup, mutated corpus
programs and excerpts, unterminated strings/discretion, broken indentation) with a seeded
``random.Random``, checks that ``compile`` never raises and that every diagnostic points inside
the source, and prints cases/s and each distinct failure with a reproducer. Exit status 1 when
anything failed.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "language"))

import prose_fuzzgen as g


def generators(sources: list[str]) -> list[tuple[str, Callable[[random.Random], str]]]:
    gens: list[tuple[str, Callable[[random.Random], str]]] = [
        ("token-soup", g.token_soup),
        ("random-chars", g.random_chars),
    ]
    if sources:
        def excerpt(rng: random.Random) -> str:
            return g.mutate(rng, g.excerpt(rng, rng.choice(sources)))

        def whole(rng: random.Random) -> str:
            return g.mutate(rng, rng.choice(sources), max_mutations=3)

        def unterminated(rng: random.Random) -> str:
            breaker = rng.choice((g.unterminate_string, g.unterminate_discretion))
            return breaker(rng, g.excerpt(rng, rng.choice(sources), 60))

        def indentation(rng: random.Random) -> str:
            text = g.excerpt(rng, rng.choice(sources), 60)
            for _ in range(rng.randint(1, 4)):
                text = g.break_indentation(rng, text)
            return text

        gens += [("corpus-excerpt", excerpt), ("corpus-excerpt", excerpt),
                 ("corpus-whole", whole), ("unterminated", unterminated),
                 ("indentation", indentation)]
    return gens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=50_000, help="number of inputs to try")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time)")
    parser.add_argument("--max-failures", type=int, default=20,
                        help="stop after this many distinct failures")
    args = parser.parse_args(argv)

    seed = args.seed if args.seed is not None else int(time.time())
    sources = g.corpus_sources()
    gens = generators(sources)
    print(f"seed {seed}; {len(sources)} corpus programs from {g.CORPUS}"
          + ("" if sources else " (absent: random text only)"))

    master = random.Random(seed)
    failures: dict[tuple[str, str], tuple[str, int, str]] = {}
    counts: dict[str, int] = {}
    total_bytes = 0
    start = last_report = time.perf_counter()
    done = 0
    for done in range(1, args.cases + 1):
        case_seed = master.getrandbits(64)
        name, gen = gens[case_seed % len(gens)]
        source = gen(random.Random(case_seed))
        counts[name] = counts.get(name, 0) + 1
        total_bytes += len(source.encode("utf-8", "surrogatepass"))
        try:
            g.check(source)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            key = (type(exc).__name__, f"{frame.filename}:{frame.lineno}")
            known = failures.get(key)
            if known is None or len(source) < len(known[0]):
                failures[key] = (source, case_seed, f"{type(exc).__name__}: {exc}")
            if len(failures) >= args.max_failures:
                print(f"stopping: {len(failures)} distinct failures")
                break
        now = time.perf_counter()
        if now - last_report >= 10:
            print(f"  {done:,} cases, {done / (now - start):,.0f} cases/s, "
                  f"{len(failures)} distinct failures", flush=True)
            last_report = now
    elapsed = time.perf_counter() - start

    print(f"{done:,} cases in {elapsed:.1f} s: {done / elapsed:,.0f} cases/s, "
          f"{total_bytes / elapsed / 1e6:.2f} MB/s of generated source")
    print("by generator: " + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())))
    if not failures:
        print("no failures")
        return 0
    print(f"{len(failures)} distinct failures (smallest reproducer of each):")
    for (kind, where), (source, case_seed, message) in failures.items():
        print(f"- {kind} at {where} (case seed {case_seed})\n  {message[:300]}\n"
              f"  source = {source[:500]!r}{' ...' if len(source) > 500 else ''}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
