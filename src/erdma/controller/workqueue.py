"""A keyed, delaying work queue: each Node is reconciled by one worker at a time.

Watch events arrive in bursts (a Node's status changes every few seconds) and requeues come from
the reconciler itself ("still Pending, look again in 10 s"). The queue folds all of that into at
most one pending run per key at the earliest requested time, and never hands a key to a second
worker while the first is still on it; an add during processing runs once more afterwards.
``len(queue)`` and ``observe_wait`` (how long a due key waited for a worker) feed the metrics.

A key added as a ``follow_up`` (a Node whose ERIs are attaching: its bring-up is under way)
goes before every other due key once its own time comes. With one queue in due order, a
fleet joining at once put each recheck behind every Node not yet started, so no two-card Node
of 5,000 was Ready before the last one had been started; finishing what is under way first
costs the others little, as a recheck is one share of a batched look-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections.abc import Callable


class WorkQueue:
    """Keys become ready at a due time; ``get`` waits for the earliest ready, idle key, taking
    due follow-ups first."""

    def __init__(self, observe_wait: Callable[[float], None] | None = None) -> None:
        self._observe_wait = observe_wait
        # key -> (due time, follow-up); a heap entry that disagrees with it is superseded
        self._due: dict[str, tuple[float, bool]] = {}
        self._heaps: dict[bool, list[tuple[float, str]]] = {True: [], False: []}
        self._active: set[str] = set()
        self._again: dict[str, tuple[float, bool]] = {}
        self._changed = asyncio.Event()

    def add(self, key: str, delay: float = 0.0, *, follow_up: bool = False) -> None:
        """Schedule ``key`` in ``delay`` seconds, unless it is already due sooner."""
        when = time.monotonic() + max(0.0, delay)
        if key in self._active:
            earlier = self._again.get(key)
            if earlier is None or when < earlier[0]:
                self._again[key] = (when, follow_up)
            return
        if key in self._due and self._due[key][0] <= when:
            return
        self._due[key] = (when, follow_up)
        heapq.heappush(self._heaps[follow_up], (when, key))
        self._changed.set()

    def __contains__(self, key: str) -> bool:
        return key in self._due or key in self._active

    def __len__(self) -> int:
        """Keys waiting to run (due now or later), those queued again while running included."""
        return len(self._due) + len(self._again)

    def _earliest(self, follow_up: bool) -> tuple[float, str] | None:
        """The first live entry of one heap, dropping superseded ones on the way."""
        heap = self._heaps[follow_up]
        while heap and self._due.get(heap[0][1]) != (heap[0][0], follow_up):
            heapq.heappop(heap)
        return heap[0] if heap else None

    async def get(self) -> str:
        """The next due key, follow-ups first; the caller must call ``done(key)`` afterwards."""
        while True:
            now = time.monotonic()
            heads = {kind: self._earliest(kind) for kind in (True, False)}
            for kind in (True, False):
                head = heads[kind]
                if head is not None and head[0] <= now:
                    due, key = heapq.heappop(self._heaps[kind])
                    del self._due[key]
                    self._active.add(key)
                    if self._observe_wait is not None:
                        self._observe_wait(now - due)
                    return key
            pending = [head[0] for head in heads.values() if head is not None]
            timeout = min(pending) - now if pending else None
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    def done(self, key: str) -> None:
        """Release ``key``; an add that arrived while it was processed is scheduled now."""
        self._active.discard(key)
        if key in self._again:
            when, follow_up = self._again.pop(key)
            self.add(key, when - time.monotonic(), follow_up=follow_up)
