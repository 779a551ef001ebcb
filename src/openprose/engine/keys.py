"""Resume keys: where a session or verdict sits in a run, independent of timing.

A key is the dynamic statement path — statement indexes through the program tree, block calls
as ``>name`` at their call site, loop iterations as ``[i]``, parallel branches as ``|b``, judgment
rounds as ``?n`` — so the same step gets the same key in every attempt, whatever order parallel
branches finish in. A block call's execution id is identified by its call path, not by the
counter value, which can differ when parallel branches enter blocks in another order. Beside
each key the engine stores a hash of the rendered input to notice an edited program on resume.
"""

from __future__ import annotations

import hashlib
import json


def child(path: str, step: str | int) -> str:
    """The path of statement ``step`` of the body at ``path``."""
    return f"{path}.{step}" if path else str(step)


def iteration(path: str, i: int) -> str:
    return f"{path}[{i}]"


def branch(path: str, i: int) -> str:
    return f"{path}|{i}"


def call(path: str, block: str) -> str:
    return f"{path}>{block}"


def judgment(path: str, round_: int) -> str:
    return f"{path}?{round_}"


def input_hash(*parts: object) -> str:
    """A short, stable hash of what a step was asked to do."""
    data = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(data.encode()).hexdigest()[:16]
