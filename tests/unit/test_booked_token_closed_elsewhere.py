"""A batched look-up's booked token must not fail its coroutine's cleanup when the coroutine is
closed outside the task that ran it (a pending batch collected as the event loop shuts down):
that cleanup's error surfaced as "Future exception was never retrieved" with a traceback."""

from __future__ import annotations

import contextvars
from collections.abc import Generator

from erdma.controller.ratelimit import TokenBucket


async def _never_slept(_: float) -> None:
    return None


def test_a_booked_coroutine_closed_in_another_context_cleans_up_quietly() -> None:
    bucket = TokenBucket(rate=10, sleep=_never_slept)

    async def batch() -> None:
        async with bucket.booked(0.0):
            await _Suspend()

    coro = batch()
    contextvars.copy_context().run(coro.send, None)  # runs until suspended, in its own context
    coro.close()  # as the garbage collector closes a pending task's coroutine: no error


class _Suspend:
    """An awaitable that suspends once (a fetch still in flight)."""

    def __await__(self) -> Generator[None, None, None]:
        yield
