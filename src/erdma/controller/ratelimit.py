"""Pacing of cloud calls: how fast to call (token bucket) and how to back off (retry policy).

ECS throttles per account; spreading calls at a steady rate keeps the controller under the
account's limit instead of bouncing off ``Throttling.User`` and retrying.  Callers reserve
a slot and sleep until it comes due, so waiting callers are served in arrival order.  When a
call still fails transiently, retries follow the shared jittered `Backoff`, so that many
reconcilers failing together do not retry in lock-step.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from erdma.aio import Backoff


class TokenBucket:
    """``rate`` calls per second on average, up to ``burst`` at once after idle time."""

    def __init__(
        self,
        rate: float,
        burst: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate limit {rate!r} calls/s is invalid; use a number > 0")
        burst = rate if burst is None else burst
        if burst < 1:
            raise ValueError(f"burst {burst!r} is invalid; use a number >= 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = burst
        self._stamp = clock()
        self.waited = 0.0

    def reserve(self) -> float:
        """Take one token now; return how many seconds the caller must wait before using it."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        self._tokens -= 1
        return max(0.0, -self._tokens / self.rate)

    async def acquire(self) -> None:
        """Wait for a slot."""
        wait = self.reserve()
        if wait > 0:
            self.waited += wait
            await self._sleep(wait)


@dataclass(frozen=True)
class RetryPolicy:
    """How often an ECS call is tried, paced by the shared `Backoff` between attempts."""

    max_attempts: int = 6
    base_delay: float = 0.2
    max_delay: float = 10.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"retry max_attempts {self.max_attempts!r} is invalid; use 1 or more")
        if self.base_delay < 0 or self.max_delay < self.base_delay:
            raise ValueError(
                f"retry delays base={self.base_delay!r} max={self.max_delay!r} are invalid; "
                "use 0 <= base <= max"
            )

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Seconds to sleep before retry number ``attempt`` (0-based)."""
        return Backoff(self.base_delay, self.max_delay, rng=rng).delay(attempt)
