"""The journal's write batching: grouping, per-item failures, cancelled waiters."""

from __future__ import annotations

import asyncio
import threading

import pytest

from openprose.engine.state_journal import Batcher


def test_items_submitted_together_share_writes_of_at_most_max_batch():
    batches: list[list[int]] = []

    def write(items: list[int]) -> list[int | Exception]:
        batches.append(items)
        return [item * 10 for item in items]

    async def main() -> list[int]:
        batcher = Batcher(write, max_batch=32)
        return await asyncio.gather(*(batcher.submit(i) for i in range(70)))

    assert asyncio.run(main()) == [i * 10 for i in range(70)]
    assert [len(batch) for batch in batches] == [32, 32, 6]
    assert [item for batch in batches for item in batch] == list(range(70))


def test_a_failed_item_fails_alone_and_a_failed_write_fails_its_batch():
    def write(items: list[int]) -> list[int | Exception]:
        if 99 in items:
            raise OSError("disk full")
        return [ValueError(f"bad {i}") if i % 2 else i for i in items]

    async def main() -> list[object]:
        batcher = Batcher(write)
        first = await asyncio.gather(*(batcher.submit(i) for i in range(4)),
                                     return_exceptions=True)
        second = await asyncio.gather(batcher.submit(99), return_exceptions=True)
        return [*first, *second]

    results = asyncio.run(main())
    assert results[0] == 0 and results[2] == 2
    assert [str(r) for r in results[1::2][:2]] == ["bad 1", "bad 3"]
    assert isinstance(results[4], OSError)


def test_result_of_a_cancelled_waiter_goes_to_orphan():
    orphans: list[int] = []
    writing, cancelled = threading.Event(), threading.Event()

    def write(items: list[int]) -> list[int | Exception]:
        writing.set()
        assert cancelled.wait(60)  # the write outlasts its waiter, whatever the speed
        return items

    async def main() -> None:
        batcher = Batcher(write, orphans.append)
        waiter = asyncio.create_task(batcher.submit(7))
        assert await asyncio.to_thread(writing.wait, 60)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        cancelled.set()
        await batcher.settle()

    asyncio.run(main())
    assert orphans == [7]
