"""Pacing of cloud calls: how fast to call (token bucket), how to back off (retry policy), and
how long a throttled API rests (per-API cool-down).

ECS throttles per account; spreading calls at a steady rate keeps the controller under the
account's limit instead of bouncing off ``Throttling.User`` and retrying.  Callers reserve
a slot and sleep until it comes due, so waiting callers are served in arrival order.  When a
call still fails transiently, retries follow the shared jittered `Backoff`, so that many
reconcilers failing together do not retry in lock-step; after a throttle, the API cools down
for every caller at once (`ThrottleGate`), as the ECS throttling guidance asks.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from erdma.aio import Backoff

#: set inside `TokenBucket.booked`: the next `acquire` in this task spends the booked token
_BOOKED: ContextVar[bool] = ContextVar("erdma_token_booked", default=False)


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
        """Wait for a slot (none inside `booked`: the booked one is used, once)."""
        if _BOOKED.get():
            _BOOKED.set(False)
            return
        await self._wait(self.reserve())

    async def _wait(self, wait: float) -> None:
        if wait > 0:
            self.waited += wait
            await self._sleep(wait)

    @asynccontextmanager
    async def booked(self, wait: float) -> AsyncIterator[None]:
        """Use a token taken earlier with `reserve`: sleep the ``wait`` still left, then let
        the next `acquire` in this task take that token instead of queueing for another.

        A batched look-up books its slot when its batch opens and keeps the batch open until
        the slot comes due, so look-ups asked for while the bucket is backlogged join it
        rather than each queueing for a request of its own.
        """
        await self._wait(wait)
        _BOOKED.set(True)
        try:
            yield
        finally:
            # set, not reset with a token: a pending batch's coroutine closed at shutdown runs
            # this outside its task's context, where a token from inside it is refused
            _BOOKED.set(False)


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


@dataclass(frozen=True)
class ThrottlePolicy:
    """How long one ECS API cools down after ``Throttling``, shared by every caller.

    ECS counts each API on its own; once an API is throttled in minute T it may refuse calls
    until minute T+1, and its guidance is to back off that API and probe it at about one call
    per second until it answers again. So the first throttle holds the API for ``initial`` to
    twice ``initial`` seconds (jittered, never less than ``initial``), each further one doubles
    that up to ``maximum``, a success clears it, and while it lasts calls go out one per
    ``probe_interval``.
    """

    initial: float = 1.0
    maximum: float = 60.0
    probe_interval: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum or self.probe_interval <= 0:
            raise ValueError(
                f"throttle cool-down initial={self.initial!r} maximum={self.maximum!r} "
                f"probe_interval={self.probe_interval!r} is invalid; use 0 < initial <= "
                "maximum and probe_interval > 0"
            )


@dataclass
class _Cooling:
    strikes: int
    struck_at: float
    until: float
    next_probe: float = 0.0


class ThrottleGate:
    """Per-API cool-down after ``Throttling``: every caller of a throttled API waits for it.

    Without it each caller retries on its own backoff, so many reconciles hitting a throttled
    API retry it within a fraction of a second of each other and keep it throttled. A call's
    outcome only counts when the call started after the latest throttle of its API: answers to
    calls that were already in flight neither add a strike nor end the cool-down.
    """

    def __init__(
        self,
        policy: ThrottlePolicy,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.policy = policy
        self.clock = clock
        self._sleep = sleep
        # Backoff jitters down to half its ceiling: a ceiling of twice ``initial`` keeps every
        # rest at ``initial`` at least
        ceiling = min(2 * policy.initial, policy.maximum)
        self._backoff = Backoff(ceiling, policy.maximum, rng=rng or random.Random())
        self._cooling: dict[str, _Cooling] = {}

    def cooling(self, action: str) -> float:
        """Seconds until ``action`` may be probed again (0 when it is not cooling down)."""
        state = self._cooling.get(action)
        return max(0.0, state.until - self.clock()) if state else 0.0

    async def wait(self, action: str) -> float:
        """Wait until ``action`` may be called; returns the seconds waited."""
        waited = 0.0
        while (state := self._cooling.get(action)) is not None:
            now = self.clock()
            slot = max(state.until, state.next_probe)
            if now >= slot:
                state.next_probe = now + self.policy.probe_interval
                break
            await self._sleep(slot - now)
            waited += slot - now
        return waited

    def struck_since(self, action: str, moment: float) -> bool:
        """Whether ``action`` was throttled after ``moment``: a caller that passed `wait`
        then and has waited since (for the rate limit) must wait for the cool-down too."""
        state = self._cooling.get(action)
        return state is not None and state.struck_at > moment

    def throttled(self, action: str, started: float) -> float:
        """ECS throttled a call of ``action`` started at ``started``; returns the cool-down."""
        state = self._cooling.get(action)
        if state is not None and started <= state.struck_at:
            return max(0.0, state.until - self.clock())
        strikes = state.strikes + 1 if state else 1
        now = self.clock()
        hold = self._backoff.delay(strikes - 1)
        self._cooling[action] = _Cooling(strikes, now, now + hold)
        return hold

    def succeeded(self, action: str, started: float) -> None:
        """A call of ``action`` started at ``started`` was answered: the API is open again."""
        state = self._cooling.get(action)
        if state is not None and started > state.struck_at:
            del self._cooling[action]
