"""Progress events the engine emits (for the live display, logs and tests)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    """``kind`` is one of: statement, session_opening, session_opened, session_start,
    session_end, session_reused, session_retry, session_failed, verdict, verdict_reused,
    cancelled, warning. ``session_opening``/``session_opened`` bracket the write that
    records a session's intent (``session_opened`` also when it failed or was cancelled);
    ``session_start`` follows once the session is open."""

    kind: str
    key: str
    line: int
    text: str = ""
    tokens: int = 0


Listener = Callable[[Event], None]
