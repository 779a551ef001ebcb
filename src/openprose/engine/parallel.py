"""Join strategies and failure policies for ``parallel`` blocks.

:func:`join` runs branch coroutines concurrently and applies the strategy (``all``, ``first``,
``any`` with ``count``) and the failure policy (``fail-fast``, ``continue``, ``ignore``).
Branches that lose are cancelled and reported to ``on_cancel``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from openprose.engine.errors import ParallelFailed, ProgramError, RecursionLimitExceeded


@dataclass(slots=True)
class Outcome:
    """What each branch (by index) produced, failed with, or whether it was cancelled."""

    values: dict[int, Any] = field(default_factory=dict)
    errors: dict[int, ProgramError] = field(default_factory=dict)
    cancelled: list[int] = field(default_factory=list)


async def join(
    branches: list[Callable[[], Coroutine[Any, Any, Any]]],
    *,
    strategy: str = "all",
    on_fail: str = "fail-fast",
    count: int | None = None,
    on_cancel: Callable[[int], None] = lambda i: None,
    window: int | None = None,
    refill_delay: Callable[[], float] = lambda: 0.0,
) -> Outcome:
    """Run ``branches`` and return their outcome, or raise :class:`ParallelFailed`.

    With a ``window``, at most that many branches are under way at once (a thousand started
    at once would spend the event loop's time preparing work the concurrency cap keeps
    waiting anyway); when one ends, the next starts ``refill_delay()`` seconds later."""
    loop = asyncio.get_running_loop()
    closed = False
    tasks: dict[asyncio.Task[Any], int] = {}
    finished: asyncio.Queue[asyncio.Task[Any]] = asyncio.Queue()
    upcoming = iter(range(len(branches)))

    def launch() -> None:
        i = None if closed else next(upcoming, None)
        if i is not None:
            task = asyncio.create_task(branches[i]())
            tasks[task] = i
            task.add_done_callback(finished.put_nowait)

    for _ in range(window or len(branches)):
        launch()
    outcome = Outcome()
    needed = count or 1
    try:
        for _ in range(len(branches)):
            task = await finished.get()
            error = task.exception()
            if error is None:
                outcome.values[tasks[task]] = task.result()
            elif isinstance(error, ProgramError):
                outcome.errors[tasks[task]] = error
            else:
                raise error
            if _settled(outcome, strategy, on_fail, needed):
                break
            delay = refill_delay()
            if delay > 0.001:
                loop.call_later(delay, launch)
            else:
                launch()
    finally:
        closed = True
        pending = [task for task in tasks if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        for task in tasks:  # failures after the deciding one are seen (never "not retrieved")
            if not task.cancelled():
                task.exception()
        for i in [tasks[task] for task in pending] + list(upcoming):
            outcome.cancelled.append(i)
            on_cancel(i)
    _check(outcome, strategy, on_fail, needed, len(branches))
    return outcome


def _settled(outcome: Outcome, strategy: str, on_fail: str, needed: int) -> bool:
    if outcome.errors and on_fail == "fail-fast" and strategy != "any":
        return True
    if strategy == "first":
        return bool(outcome.values or outcome.errors)
    if strategy == "any":
        successes = len(outcome.values) + (len(outcome.errors) if on_fail == "ignore" else 0)
        return successes >= needed
    return False


def _check(outcome: Outcome, strategy: str, on_fail: str, needed: int, total: int) -> None:
    errors = outcome.errors
    if not errors or on_fail == "ignore":
        return
    if strategy == "any":
        if len(outcome.values) >= needed:
            return
        message = f"parallel (\"any\") got {len(outcome.values)} of {needed} successes"
    elif strategy == "first" and on_fail == "continue":
        return
    else:
        message = f"{len(errors)} of {total} parallel branches failed"
    for error in errors.values():  # the program's recursion limit, not one branch's failure
        if isinstance(error, RecursionLimitExceeded):
            raise error
    details = "; ".join(f"branch {i + 1}: {e.message}" for i, e in sorted(errors.items()))
    raise ParallelFailed(f"{message}: {details}", {str(i): e for i, e in errors.items()})
