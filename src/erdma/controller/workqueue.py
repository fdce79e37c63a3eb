"""A keyed, delaying work queue: each Node is reconciled by one worker at a time.

Watch events arrive in bursts (a Node's status changes every few seconds) and requeues come from
the reconciler itself ("still Pending, look again in 10 s"). The queue folds all of that into at
most one pending run per key at the earliest requested time, and never hands a key to a second
worker while the first is still on it; an add during processing runs once more afterwards.
``len(queue)`` and ``observe_wait`` (how long a due key waited for a worker) feed the metrics.

A key added as a ``follow_up`` (a Node whose ERIs are attaching: its bring-up is under way)
takes turns with the other due keys once its own time comes, instead of waiting behind all
of them. With one queue in due order, a fleet joining at once put each recheck behind every
Node not yet started, so no two-card Node of 5,000 was Ready before the last one had been
started; finishing what is under way first costs the others little, as a recheck is one
share of a batched look-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections.abc import Callable


class WorkQueue:
    """Keys become ready at a due time; ``get`` waits for the earliest ready, idle key, due
    follow-ups and other keys taking turns."""

    def __init__(self, observe_wait: Callable[[float], None] | None = None) -> None:
        self._observe_wait = observe_wait
        # key -> (due time, follow-up); a heap entry that disagrees with it is superseded
        self._due: dict[str, tuple[float, bool]] = {}
        self._heaps: dict[bool, list[tuple[float, str]]] = {True: [], False: []}
        self._active: set[str] = set()
        self._again: dict[str, tuple[float, bool]] = {}
        # whether the last choice between a due follow-up and another due key was the follow-up
        self._follow_up_served = False
        self._changed = asyncio.Event()

    def add(self, key: str, delay: float = 0.0, *, follow_up: bool = False) -> None:
        """Schedule ``key`` in ``delay`` seconds, unless it is already due sooner.

        A key stays a follow-up once added as one, whatever adds it again sooner (a watch
        event during its bring-up must not send it behind the backlog).
        """
        when = time.monotonic() + max(0.0, delay)
        if key in self._active:
            earlier_when, earlier_follow_up = self._again.get(key, (when, False))
            self._again[key] = (min(when, earlier_when), follow_up or earlier_follow_up)
            return
        earlier = self._due.get(key)
        if earlier is not None:
            follow_up = follow_up or earlier[1]
            if earlier == (min(when, earlier[0]), follow_up):
                return
            when = min(when, earlier[0])
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
        """The next due key; the caller must call ``done(key)`` afterwards.

        When both kinds have a due key they take turns, a follow-up first: a follow-up waits
        for one other key at most, and Nodes that stay attaching cannot starve the rest.
        """
        while True:
            now = time.monotonic()
            heads = {kind: self._earliest(kind) for kind in (True, False)}
            due = [kind for kind, head in heads.items() if head is not None and head[0] <= now]
            if due:
                kind = due[0] if len(due) == 1 else not self._follow_up_served
                if len(due) == 2:
                    self._follow_up_served = kind
                when, key = heapq.heappop(self._heaps[kind])
                del self._due[key]
                self._active.add(key)
                if self._observe_wait is not None:
                    self._observe_wait(now - when)
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
