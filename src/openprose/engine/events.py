"""Progress events the engine emits (for the live display, logs and tests)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    """``kind`` is one of: statement, session_start, session_end, session_reused,
    session_retry, session_failed, verdict, verdict_reused, cancelled, warning."""

    kind: str
    key: str
    line: int
    text: str = ""
    tokens: int = 0


Listener = Callable[[Event], None]
