"""``parallel.join`` with a window: how many branches run at once, and when the next starts."""

from __future__ import annotations

import asyncio
import selectors
import time

import pytest

from openprose.engine.errors import ParallelFailed, ProgramError
from openprose.engine.parallel import join


def _branches(seconds: list[float], started: dict[int, float], fail: int = -1,
              cleanup: float = 0.0, ended: dict[int, float] | None = None):
    """Branch i sleeps seconds[i]; ``fail`` raises; a cancelled branch takes ``cleanup``;
    ``ended`` gets the moment each branch ended."""
    def make(i: int):
        async def branch() -> int:
            started[i] = time.monotonic()
            try:
                await asyncio.sleep(seconds[i])
            except asyncio.CancelledError:
                await asyncio.sleep(cleanup)
                raise
            if ended is not None:
                ended[i] = time.monotonic()
            if i == fail:
                raise ProgramError(f"branch {i} failed")
            return i * 2
        return branch
    return [make(i) for i in range(len(seconds))]


def test_window_starts_the_next_branch_after_the_refill_delay():
    started: dict[int, float] = {}
    ended: dict[int, float] = {}

    async def main():
        return await join(_branches([0] * 4, started, ended=ended), window=2,
                          refill_delay=lambda: 0.05)

    outcome = asyncio.run(main())
    assert outcome.values == {0: 0, 1: 2, 2: 4, 3: 6}
    # the first two run together; each later one waits the delay after a slot frees
    assert started[1] < ended[0]
    first_free = min(ended[0], ended[1])
    assert started[2] - first_free >= 0.05 and started[3] - first_free >= 0.05


class _JumpingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """A selector whose clock moves only when the loop would wait: it jumps to the next
    timer. Timers then fire in the order of their deadlines whatever the machine's speed."""

    clock = 0.0

    def select(self, timeout: float | None = None) -> list:
        ready = super().select(0)
        if ready or timeout is None:
            return ready or super().select(None)
        self.clock += max(timeout, 0.0)
        return []


class _VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on :class:`_JumpingSelector`'s clock."""

    def __init__(self) -> None:
        self.selector = _JumpingSelector()
        super().__init__(self.selector)

    def time(self) -> float:
        return self.selector.clock


def test_no_branch_starts_once_a_join_has_failed():
    """Branch 0 ends and schedules a refill; branch 1 fails before the refill is due, and
    the refill comes due while branch 2 is still being cancelled. On the loop's virtual
    clock that is the deadlines' order however slow the machine: here the process stalls
    longer than the refill delay right after the refill is scheduled (on wall-clock time
    the refill then came due with branch 1's failure, and started branch 3)."""
    started: dict[int, float] = {}
    cancelled: list[int] = []

    def refill_delay() -> float:
        asyncio.get_running_loop().call_soon(time.sleep, 0.06)  # a loaded machine's stall
        return 0.05

    async def main():
        with pytest.raises(ParallelFailed):
            await join(_branches([0.005, 0.02, 1, 1, 1], started, fail=1, cleanup=0.1),
                       window=3, refill_delay=refill_delay, on_cancel=cancelled.append)
        await asyncio.sleep(0.1)

    with asyncio.Runner(loop_factory=_VirtualTimeLoop) as runner:
        runner.run(main())
    assert sorted(started) == [0, 1, 2]
    assert sorted(cancelled) == [2, 3, 4]


def test_failures_after_the_deciding_one_are_not_left_unretrieved(caplog):
    import gc

    async def main():
        with pytest.raises(ParallelFailed):
            await join(_branches([0.01] * 6, {}, fail=0) + [_fails_at(0.01)] * 3)

    def _fails_at(seconds: float):
        async def branch() -> None:
            await asyncio.sleep(seconds)
            raise ProgramError("also failed")
        return branch

    with caplog.at_level("ERROR", logger="asyncio"):
        asyncio.run(main())
        gc.collect()
    assert "never retrieved" not in caplog.text
