"""Resume keys: where a session or verdict sits in a run, independent of timing.

A key is the dynamic statement path, built with :mod:`openprose.language.paths` (the one
definition of the format): the static path of the statement plus loop iterations ``[i]``, block
calls ``>name`` at their call site and judgment rounds ``?n``, so the same step gets the same
key in every attempt, whatever order parallel branches finish in. A block call's execution id
is identified by its call path, not by the counter value, which can differ when parallel
branches enter blocks in another order. Beside each key the engine stores a hash of the
rendered input to notice an edited program on resume.
"""

from __future__ import annotations

import hashlib
import json


def input_hash(*parts: object) -> str:
    """A short, stable hash of what a step was asked to do."""
    data = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(data.encode()).hexdigest()[:16]
