"""Read-outs of an emulated region for tests and the fault suite: leaks and duplicates.

An ERI of the controller's (tagged ``creator=alibabacloud-erdma-controller``) is *leaked* when
nothing will ever use it: its instance is gone, or it is attached to nothing. One attached to a
running instance is not a leak even without a Node: it is adopted when a Node returns. A
*duplicate* is a second ERI of ours for the same card of one instance.
"""

from __future__ import annotations

from collections import Counter

from tests.fakes.ecs.records import HIGH_PERFORMANCE, EniRecord
from tests.fakes.ecs.state import EcsWorld

CREATOR = ("creator", "alibabacloud-erdma-controller")
INSTANCE_TAG = "instance-id"
CARD_TAG = "network.alibabacloud.com/erdma-card-index"


def ours(world: EcsWorld, instance_id: str | None = None) -> list[EniRecord]:
    """The controller's ERIs in the region, or those tagged for one instance."""
    world.settle()
    with world.lock:
        return [
            e
            for e in world.enis.values()
            if e.tags.get(CREATOR[0]) == CREATOR[1]
            and (instance_id is None or e.tags.get(INSTANCE_TAG) == instance_id)
        ]


def leaked(world: EcsWorld, instance_id: str | None = None) -> list[str]:
    """Our ERIs that nothing will use: instance gone, or attached to nothing."""
    with world.lock:
        running = set(world.instances)
        return sorted(
            e.id
            for e in ours(world, instance_id)
            if e.tags.get(INSTANCE_TAG) not in running or not e.instance_id
        )


def duplicates(world: EcsWorld) -> list[str]:
    """``instance/card`` pairs that carry more than one ERI of ours (attached or waiting)."""
    cards = Counter(
        f"{e.tags.get(INSTANCE_TAG)}/{e.card_index if e.instance_id else e.tags.get(CARD_TAG)}"
        for e in ours(world)
    )
    return sorted(key for key, n in cards.items() if n > 1)


def eris_on(world: EcsWorld, instance_id: str) -> dict[int, str]:
    """Card index -> ERI id of every HighPerformance ENI attached to the instance."""
    world.settle()
    with world.lock:
        return {
            e.card_index: e.id
            for e in world.enis.values()
            if e.instance_id == instance_id and e.traffic_mode == HIGH_PERFORMANCE
        }
