"""The emulator accepts exactly the parameters ECS does: any query the official SDK signs, a
name its request model lacks refused by name, and batched IDs capped at ECS's 100."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from alibabacloud_tea_openapi import utils_models  # type: ignore[import-untyped]
from darabonba.runtime import RuntimeOptions  # type: ignore[import-untyped]

from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GPU_TWO_CARDS, standard_world
from tests.integration.ecs_sdk_support import REGION, expect_error, sdk


@pytest.fixture
async def emu() -> AsyncIterator[EcsEmulator]:
    async with EcsEmulator(standard_world(REGION)) as emulator:
        yield emulator


async def rpc(emu: EcsEmulator, action: str, query: dict[str, str]) -> dict:
    """Any query, signed by the official SDK, for parameters its typed requests cannot send."""
    params = utils_models.Params(
        action=action,
        version="2014-05-26",
        protocol="HTTP",
        pathname="/",
        method="POST",
        auth_type="AK",
        style="RPC",
        req_body_type="formData",
        body_type="json",
    )
    request = utils_models.OpenApiRequest(query=query)
    return await sdk(emu).call_api_async(params, request, RuntimeOptions())


async def test_a_parameter_ecs_does_not_know_is_refused(emu: EcsEmulator) -> None:
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    found = await rpc(
        emu, "DescribeInstances", {"RegionId": REGION, "InstanceIds": f'["{inst.id}"]'}
    )
    assert found["body"]["Instances"]["Instance"][0]["InstanceId"] == inst.id
    # TrafficMode is a misspelling of NetworkInterfaceTrafficMode
    query = {
        "RegionId": REGION,
        "VSwitchId": inst.vswitch_id,
        "SecurityGroupId": "sg-1",
        "TrafficMode": "HighPerformance",
    }
    message = await expect_error(rpc(emu, "CreateNetworkInterface", query), "InvalidParameter", 400)
    assert '"TrafficMode"' in message and "NetworkInterfaceTrafficMode" in message
    assert not [e for e in emu.world.enis.values() if e.type == "Secondary"]
    # an indexed parameter of another API is refused by its name
    tagged = {"RegionId": REGION, "NetworkInterfaceId": "eni-1", "Tag.1.Key": "a"}
    message = await expect_error(
        rpc(emu, "AttachNetworkInterface", tagged), "InvalidParameter", 400
    )
    assert '"Tag.1.Key"' in message


async def test_batched_look_ups_are_capped_as_ecs_caps_them(emu: EcsEmulator) -> None:
    ids = [f"eni-{i}" for i in range(101)]
    query = {"RegionId": REGION, **{f"NetworkInterfaceId.{i + 1}": v for i, v in enumerate(ids)}}
    message = await expect_error(
        rpc(emu, "DescribeNetworkInterfaces", query), "InvalidParameter.NetworkInterfaceId", 400
    )
    assert "101" in message and "at most 100" in message
