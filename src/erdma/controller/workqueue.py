"""A keyed, delaying work queue: each Node is reconciled by one worker at a time.

Watch events arrive in bursts (a Node's status changes every few seconds) and requeues come from
the reconciler itself ("still Pending, look again in 10 s"). The queue folds all of that into at
most one pending run per key at the earliest requested time, and never hands a key to a second
worker while the first is still on it; an add during processing runs once more afterwards.
``len(queue)`` and ``observe_wait`` (how long a due key waited for a worker) feed the metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections.abc import Callable


class WorkQueue:
    """Keys become ready at a due time; ``get`` waits for the earliest ready, idle key."""

    def __init__(self, observe_wait: Callable[[float], None] | None = None) -> None:
        self._observe_wait = observe_wait
        self._due: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []
        self._active: set[str] = set()
        self._again: dict[str, float] = {}
        self._changed = asyncio.Event()

    def add(self, key: str, delay: float = 0.0) -> None:
        """Schedule ``key`` in ``delay`` seconds, unless it is already due sooner."""
        when = time.monotonic() + max(0.0, delay)
        if key in self._active:
            self._again[key] = min(when, self._again.get(key, when))
            return
        if key in self._due and self._due[key] <= when:
            return
        self._due[key] = when
        heapq.heappush(self._heap, (when, key))
        self._changed.set()

    def __contains__(self, key: str) -> bool:
        return key in self._due or key in self._active

    def __len__(self) -> int:
        """Keys waiting to run (due now or later), those queued again while running included."""
        return len(self._due) + len(self._again)

    async def get(self) -> str:
        """The next due key; the caller must call ``done(key)`` afterwards."""
        while True:
            while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
                heapq.heappop(self._heap)  # superseded entry
            now = time.monotonic()
            if self._heap and self._heap[0][0] <= now:
                due, key = heapq.heappop(self._heap)
                del self._due[key]
                self._active.add(key)
                if self._observe_wait is not None:
                    self._observe_wait(now - due)
                return key
            timeout = self._heap[0][0] - now if self._heap else None
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    def done(self, key: str) -> None:
        """Release ``key``; an add that arrived while it was processed is scheduled now."""
        self._active.discard(key)
        if key in self._again:
            when = self._again.pop(key)
            self.add(key, when - time.monotonic())
