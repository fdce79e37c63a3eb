"""A leftover search takes the answer of a region-wide query sent after its instance's last
create here ended, instead of a query of its own (the calls ECS received are counted).

Such a query already shows any ERI that create left, whether or not its answer came back; a
search for an instance whose create ended after the query was sent gets a new query.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from erdma.controller.cloud import owned_tags
from erdma.controller.providers.ecs.client import EcsCloud
from erdma.controller.providers.ecs.credentials import CredentialSettings, build_credential_client
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GPU_TWO_CARDS, cloud_for, standard_world
from tests.fakes.ecs.server import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET


@pytest.fixture
async def emu() -> AsyncIterator[EcsEmulator]:
    async with EcsEmulator(standard_world()) as emulator:
        yield emulator


def _patient_cloud(emu: EcsEmulator) -> EcsCloud:
    """A client whose answers stay reusable for 20 s (a 1 s batch window), so what the test
    counts does not depend on how fast the machine runs it."""
    credential = build_credential_client(
        CredentialSettings("access_key", DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET)
    )
    return EcsCloud(replace(cloud_for(emu).settings, batch_window=1.0), credential)


async def test_searches_share_an_answer_sent_after_their_instances_last_create(emu):
    first, second = (emu.world.add_instance(GPU_TWO_CARDS.name) for _ in range(2))
    cloud = _patient_cloud(emu)
    instance = await cloud.find_instance(instance_id=first.id)  # waits a batch window (1 s)
    assert instance is not None
    searches = emu.faults.calls["DescribeNetworkInterfaces"]
    assert await cloud.leftover_eris(first.id) == []  # a window again: the query
    assert await cloud.leftover_eris(second.id) == []  # that answer, no window, no query
    assert emu.faults.calls["DescribeNetworkInterfaces"] == searches + 1

    # a create whose answer is lost (as if it timed out) leaves an ERI for the first instance
    left = await cloud.create_eri(instance, 1, 8, "lost-answer", owned_tags(first.id))
    assert [e.id for e in await cloud.leftover_eris(first.id)] == [left.id]  # a new query
    assert await cloud.leftover_eris(second.id) == []  # its answer again
    assert emu.faults.calls["DescribeNetworkInterfaces"] == searches + 2
    await cloud.close()
