"""Progress events the engine emits (for the live display, the journal, logs, traces and
tests)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from openprose.state.models import Usage


@dataclass(frozen=True, slots=True)
class Event:
    """``kind`` is one of: statement, statement_end, session_opening, session_opened,
    session_start, session_call, session_called, session_end, session_reused, session_retry,
    session_failed, judging, verdict, verdict_failed, verdict_reused, cancelled, warning.

    ``statement``/``statement_end`` bracket each statement (``text``: its node class, then the
    error it failed with, empty when it did not). ``session_opening``/``session_opened``
    bracket the write that records a session's intent (``session_opened`` also when it failed
    or was cancelled); ``session_start`` follows once the session is open, and
    ``session_call`` each time an attempt gets one of the run's ``--max-concurrency`` slots
    and calls the model (until then it is queued), ``session_called`` when the call
    returned (its result is being recorded). ``judging`` comes before a model is asked for a
    verdict, ``verdict`` or ``verdict_failed`` after.

    ``model`` is what the program asked for (``None``: the provider's default); ``usage``
    comes with ``session_end`` and ``verdict``; ``content`` is the whole prompt
    (``session_start``), output (``session_end``) or a retried attempt's error
    (``session_retry``), for listeners that keep it (traces, when asked to)."""

    kind: str
    key: str
    line: int
    text: str = ""
    tokens: int = 0
    model: str | None = None
    usage: Usage | None = None
    content: str = ""


Listener = Callable[[Event], None]
