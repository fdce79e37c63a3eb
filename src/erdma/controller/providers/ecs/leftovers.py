"""The search for leftover ERIs: Available ERIs of ours that an earlier create left behind
(its answer lost, or the controller stopped before attaching), found by their tags.

One region-wide query (creator tag, status Available) answers for every instance, so searches
that come together share one query (``erdma.controller.batching``), and its answer also serves
later searches for a while. Passes reach the search in waves 0.2-0.5 s apart (the rate limit
paces their look-ups), and each wave sent a query of its own: 0.045 per Node of 1,000, 0.021
with answers kept 1 s (bench/bench_controller_cloud.py). What makes a kept answer valid for an
instance is that its query was sent after the instance's last create here ended: such a query
already shows any ERI that create left. The age limit only bounds what another actor could
have added unseen, a race any search has.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping

from erdma.controller.batching import Coalescer
from erdma.controller.cloud import INSTANCE_ID_TAG_KEY, Eni

#: every instance's leftovers, by instance id
Answer = Mapping[str, tuple[Eni, ...]]


class LeftoverSearch:
    """``find(instance_id)``: the instance's leftover ERIs; ``create_ended(instance_id)``
    after every create for it, answered or not (ECS may hold the ERI from then on).

    ``query`` lists every Available ERI of ours in the region; ``batch`` makes the coalescer
    that shares one query among concurrent searches; ``reuse_seconds`` is how long an answer
    serves later searches.
    """

    def __init__(
        self,
        query: Callable[[], Awaitable[list[Eni]]],
        batch: Callable[
            [Callable[[list[str]], Awaitable[dict[str, Answer]]]], Coalescer[str, Answer]
        ],
        reuse_seconds: float,
    ) -> None:
        self._query = query
        self._batch = batch(self._fetch)
        self._reuse = reuse_seconds
        self._answer: tuple[float, Answer] = (-math.inf, {})
        self._created: dict[str, float] = {}  # instance -> when its last create ended, in order

    async def find(self, instance_id: str) -> list[Eni]:
        sent, found = self._answer
        age = asyncio.get_running_loop().time() - sent
        if age > self._reuse or sent <= self._created.get(instance_id, -math.inf):
            found = await self._batch.get(instance_id) or {}
        return list(found.get(instance_id, ()))

    def create_ended(self, instance_id: str) -> None:
        """Note when a create for the instance ended; forget those no kept answer predates."""
        now = asyncio.get_running_loop().time()
        self._created.pop(instance_id, None)
        self._created[instance_id] = now  # the dict stays in the order the creates ended
        for old, ended in list(self._created.items()):
            if ended >= now - self._reuse:
                break
            del self._created[old]

    async def _fetch(self, instance_ids: list[str]) -> dict[str, Answer]:
        """Every instance's leftovers, to each of ``instance_ids`` (and to later searches)."""
        sent = asyncio.get_running_loop().time()  # at the latest: the request goes out now
        found: dict[str, list[Eni]] = {}
        for eni in await self._query():
            found.setdefault(eni.tags.get(INSTANCE_ID_TAG_KEY, ""), []).append(eni)
        answer = {k: tuple(v) for k, v in found.items()}
        if sent > self._answer[0]:
            self._answer = (sent, answer)
        return dict.fromkeys(instance_ids, answer)
