"""Passes that looked their ENIs up together tag them together, whatever else they go on to do.

A two-card instance's first pass also looks for leftover ERIs before it creates one; its
primary ENI's Terway-exclusion tag goes out beside that look-up, in the same request as the
one-card instances' (the calls ECS received are counted, not timed).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from erdma.controller.eri import ensure_eris
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GENERAL_ERI, GPU_TWO_CARDS, cloud_for, standard_world


@pytest.fixture
async def emu() -> AsyncIterator[EcsEmulator]:
    async with EcsEmulator(standard_world(transition_delay=0.05)) as emulator:
        yield emulator


async def test_first_passes_of_mixed_instances_tag_their_primaries_in_one_request(emu):
    types = [GPU_TWO_CARDS.name, GENERAL_ERI.name] * 10
    ids = [emu.world.add_instance(t).id for t in types]
    cloud = cloud_for(emu)
    for name in set(types):  # the type look-ups out of the way: they are not batched by id
        await cloud.instance_type_caps(name)

    async def first_pass(instance_id: str) -> None:
        instance = await cloud.find_instance(instance_id=instance_id)
        assert instance is not None
        await ensure_eris(cloud, instance, await cloud.instance_type_caps(instance.instance_type))

    await asyncio.gather(*(first_pass(i) for i in ids))

    calls = emu.faults.calls
    assert calls["CreateNetworkInterface"] == 10  # card 1 of each two-card instance
    assert calls["TagResources"] == 1  # 20 primaries, one request
    # one look-up of the instances' ENIs, one region-wide query for leftovers
    assert calls["DescribeNetworkInterfaces"] == 2
    for instance_id in ids:
        primary = next(e for e in emu.world.enis_of(instance_id) if e.type == "Primary")
        assert primary.tags.get("terway.alibabacloud.com/excluded") == "true"
