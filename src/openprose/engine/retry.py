"""Session retry policy: ``retry: N`` further attempts, ``backoff`` none/linear/exponential."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

Sleep = Callable[[float], Awaitable[None]]

BASE_DELAY = 1.0
MAX_DELAY = 60.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    retries: int = 0
    backoff: str = "none"
    base_delay: float = BASE_DELAY

    @property
    def attempts(self) -> int:
        return 1 + max(0, self.retries)

    def delay(self, failed_attempt: int) -> float:
        """Seconds to wait after attempt ``failed_attempt`` (1-based) failed."""
        if self.backoff == "linear":
            return min(MAX_DELAY, self.base_delay * failed_attempt)
        if self.backoff == "exponential":
            return min(MAX_DELAY, self.base_delay * 2 ** (failed_attempt - 1))
        return 0.0


async def real_sleep(seconds: float) -> None:
    if seconds > 0:
        await asyncio.sleep(seconds)
