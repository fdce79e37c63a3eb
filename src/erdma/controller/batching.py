"""Coalescing of concurrent look-ups into one ECS request: the API quota is shared by the account.

Many reconciles run at once (a fleet joining, the periodic re-verification) and each wants a
few items of the same kind: its instance, its ENIs. ECS answers up to 100 of them per request,
so a ``Coalescer`` collects the keys asked for during a short window (or until a batch is full)
and fetches them together; every caller gets its own item. A failed fetch fails every caller of
that batch with the same error, as if each had made the call itself.

With a token bucket, a batch books its request's slot when it opens and stays open until that
slot comes due (at least the window): while the account's rate limit holds calls back, the
look-ups asked for meanwhile ride in one request instead of queueing for one each, at no extra
latency (the request could not have gone out earlier).

While company keeps coming, a batch also stays open: each look-up that joins it moves its
close to ``window`` after that look-up, up to ``hold`` after the batch opened. A lone look-up
still waits only ``window``, and a burst (a fleet joining) closes ``window`` after its last
look-up; but a steady stream of passes (many Nodes reconciled at a rate below what a fixed
window gathers) fills one request per ``hold`` instead of one per ``window``, so the calls
per Node do not depend on whether the account's rate limit happens to be the bottleneck.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Generic, TypeVar

from erdma.controller.ratelimit import TokenBucket

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Coalescer(Generic[K, V]):
    """``get(key)`` waits up to ``window`` seconds for company, then one ``fetch`` serves all.

    Each key that joins an open batch keeps it open ``window`` longer, up to ``hold`` seconds
    (default: ``window``, a fixed window) after it opened. ``fetch`` receives at most
    ``max_batch`` distinct keys and returns what it found; a key it leaves out is answered with
    None. Its first call through ``bucket`` uses the slot the batch
    booked (see the module docstring).
    """

    def __init__(
        self,
        fetch: Callable[[list[K]], Awaitable[Mapping[K, V]]],
        *,
        window: float,
        max_batch: int,
        bucket: TokenBucket | None = None,
        hold: float | None = None,
    ) -> None:
        if window < 0 or max_batch < 1:
            raise ValueError(
                f"batch window {window!r} s / size {max_batch!r} is invalid; use >= 0 and >= 1"
            )
        hold = window if hold is None else hold
        if hold < window:
            raise ValueError(f"batch hold {hold!r} s is shorter than its window {window!r} s")
        self._fetch = fetch
        self._window = window
        self._hold = hold
        self._max = max_batch
        self._bucket = bucket
        self._keys: dict[K, None] = {}
        self._answer: asyncio.Future[Mapping[K, V]] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0  # loop time at which the open batch's booked slot comes due
        self._opened = 0.0  # loop time at which the open batch opened
        self._close_at = 0.0  # loop time at which the open batch closes, unless full first
        self._running: set[asyncio.Task[None]] = set()

    async def get(self, key: K) -> V | None:
        """The item for ``key``, fetched together with those asked for by concurrent callers."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._answer is None:
            slot = self._bucket.reserve() if self._bucket is not None else 0.0
            self._opened, self._due = now, now + slot
            self._answer = loop.create_future()
            self._close_at = now + max(self._window, slot)
            self._arm()
        else:  # company: stay open a window longer, within the hold (and the booked slot)
            self._close_at = max(self._close_at, min(now + self._window, self._opened + self._hold))
        answer = self._answer
        self._keys[key] = None
        if len(self._keys) >= self._max:
            self._flush()
        found = await asyncio.shield(answer)
        return found.get(key)

    def _expire(self, armed_for: float) -> None:
        """The timer came: close the batch, or wait on when a later look-up moved its close."""
        if self._close_at > armed_for:
            self._arm()
            return
        self._flush()

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(self._close_at, self._expire, self._close_at)

    def _flush(self) -> None:
        """Close the open batch and fetch it in the background."""
        if self._timer is not None:
            self._timer.cancel()
        answer, keys = self._answer, list(self._keys)
        self._answer, self._timer, self._keys = None, None, {}
        if answer is None:
            return
        task = asyncio.ensure_future(self._run(keys, answer, self._due))
        self._running.add(task)  # a reference, so the task is not collected before it ends
        task.add_done_callback(self._running.discard)

    async def _run(self, keys: list[K], answer: asyncio.Future[Mapping[K, V]], due: float) -> None:
        try:
            if self._bucket is None:
                answer.set_result(await self._fetch(keys))
                return
            async with self._bucket.booked(due - asyncio.get_running_loop().time()):
                answer.set_result(await self._fetch(keys))
        except asyncio.CancelledError:
            answer.cancel()
            raise
        except Exception as exc:  # every waiter of the batch gets the fetch's own error
            answer.set_exception(exc)
            # each waiter gets it through its shield; marked retrieved here so that a batch
            # failed as the loop shuts down (no waiter left) logs no "never retrieved" error
            answer.exception()
