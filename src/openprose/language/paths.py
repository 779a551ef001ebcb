"""The statement-path format, defined once: how a path is built and how it is read back.

A path is statement indexes through the program tree joined by ``.``, with labels for the
bodies of constructs (``b0``/``else`` under ``if``, ``o0`` under a ``choice`` option,
``try``/``catch``/``finally``, ``s1`` for an arrow step, ``p0`` for a pipeline stage) and
``|b`` for a parallel branch: the static part, which :mod:`openprose.language.analysis` gives
every statement. At run time the engine appends ``[i]`` for a loop iteration, ``>name`` for a
block call and ``?n`` for a judgment round (its resume keys, :mod:`openprose.engine.keys`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator


def child(path: str, step: str | int) -> str:
    """The path of statement ``step`` of the body at ``path``."""
    return f"{path}.{step}" if path else str(step)


def branch(path: str, i: int) -> str:
    return f"{path}|{i}"


def iteration(path: str, i: int) -> str:
    return f"{path}[{i}]"


def call(path: str, block: str) -> str:
    return f"{path}>{block}"


def judgment(path: str, round_: int) -> str:
    return f"{path}?{round_}"


_TOKEN = re.compile(r"\[(\d+)\]|\|(\d+)|>([^.\[|>?]+)|\?(\d+)|\.?([a-z]+\d*|\d+)")


def tokens(key: str) -> Iterator[tuple[str, str, str]]:
    """The parts of a path or key, in order: (kind, value, the key before it); kind is step,
    branch, iteration, call or judgment."""
    kinds = ("iteration", "branch", "call", "judgment", "step")
    for match in _TOKEN.finditer(key):
        kind, value = next((k, v) for k, v in zip(kinds, match.groups(), strict=True)
                           if v is not None)
        yield kind, value, key[:match.start()]
