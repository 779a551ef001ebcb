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
class BranchOutcome:
    """What each branch (by index) produced, failed with, or whether it was cancelled."""

    values: dict[int, Any] = field(default_factory=dict)
    errors: dict[int, ProgramError] = field(default_factory=dict)
    cancelled: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class JoinDecision:
    """Which branches a join took (``won``) and which had failed when it decided
    (``failed``: index → message); every other branch was cancelled. Timing makes this
    decision, so a resumed run replays it instead of deciding again."""

    won: tuple[int, ...]
    failed: tuple[tuple[int, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"won": list(self.won), "failed": [list(f) for f in self.failed]}

    @classmethod
    def from_json(cls, data: Any, branches: int) -> JoinDecision | None:
        """The decision recorded as ``data``, or None if it does not fit ``branches``."""
        try:
            won = tuple(int(i) for i in data["won"])
            failed = tuple((int(i), str(m)) for i, m in data.get("failed", ()))
        except (TypeError, KeyError, ValueError):
            return None
        if not all(0 <= i < branches for i in (*won, *(i for i, _ in failed))):
            return None
        return cls(won, failed)


async def join(
    branches: list[Callable[[], Coroutine[Any, Any, Any]]],
    *,
    strategy: str = "all",
    on_fail: str = "fail-fast",
    count: int | None = None,
    on_cancel: Callable[[int], None] = lambda i: None,
    window: int | None = None,
    refill_delay: Callable[[], float] = lambda: 0.0,
    on_decide: Callable[[JoinDecision], None] | None = None,
) -> BranchOutcome:
    """Run ``branches`` and return their outcome, or raise :class:`ParallelFailed`.

    With a ``window``, at most that many branches are under way at once (a thousand started
    at once would spend the event loop's time preparing work the concurrency cap keeps
    waiting anyway); when one ends, the next starts ``refill_delay()`` seconds later.
    ``on_decide`` hears a successful join's decision before the losers are cancelled."""
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
    outcome = BranchOutcome()
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
        if on_decide is not None and _failure(outcome, strategy, on_fail, needed,
                                              len(branches)) is None:
            on_decide(JoinDecision(tuple(sorted(outcome.values)),
                               tuple((i, e.message) for i, e in sorted(outcome.errors.items()))))
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
    failure = _failure(outcome, strategy, on_fail, needed, len(branches))
    if failure is not None:
        raise failure
    return outcome


async def replay(branches: list[Callable[[], Coroutine[Any, Any, Any]]], decision: JoinDecision,
                 on_cancel: Callable[[int], None] = lambda i: None) -> BranchOutcome:
    """The outcome of a join decided before (in an earlier run of the same program): only
    the branches it took run again (their finished steps are reused); the branches that
    had failed keep their errors; the rest stay cancelled."""
    won = list(decision.won)
    again = await join([branches[i] for i in won])
    outcome = BranchOutcome(values={won[k]: value for k, value in again.values.items()},
                      errors={i: ProgramError(message) for i, message in decision.failed})
    failed = dict(decision.failed)
    for i in range(len(branches)):
        if i not in outcome.values and i not in failed:
            outcome.cancelled.append(i)
            on_cancel(i)
    return outcome


def _settled(outcome: BranchOutcome, strategy: str, on_fail: str, needed: int) -> bool:
    if outcome.errors and on_fail == "fail-fast" and strategy != "any":
        return True
    if strategy == "first":
        return bool(outcome.values or outcome.errors)
    if strategy == "any":
        successes = len(outcome.values) + (len(outcome.errors) if on_fail == "ignore" else 0)
        return successes >= needed
    return False


def _failure(outcome: BranchOutcome, strategy: str, on_fail: str, needed: int, total: int
             ) -> ProgramError | None:
    """The error the join ends with under its failure policy (None: it succeeded)."""
    errors = outcome.errors
    if not errors or on_fail == "ignore":
        return None
    if strategy == "any":
        if len(outcome.values) >= needed:
            return None
        message = f"parallel (\"any\") got {len(outcome.values)} of {needed} successes"
    elif strategy == "first" and on_fail == "continue":
        return None
    else:
        message = f"{len(errors)} of {total} parallel branches failed"
    for error in errors.values():  # the program's recursion limit, not one branch's failure
        if isinstance(error, RecursionLimitExceeded):
            return error
    details = "; ".join(f"branch {i + 1}: {e.message}" for i, e in sorted(errors.items()))
    return ParallelFailed(f"{message}: {details}", {str(i): e for i, e in errors.items()})
