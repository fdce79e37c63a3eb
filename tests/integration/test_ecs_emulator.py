"""The ECS emulator behaves like ECS towards the unmodified official SDK over real HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from alibabacloud_ecs20140526 import models as m  # type: ignore[import-untyped]
from alibabacloud_tea_openapi.exceptions import (  # type: ignore[import-untyped]
    AlibabaCloudException,
)

from erdma.host.metadata import MetadataClient, MetadataError
from tests.fakes.ecs import (
    EcsEmulator,
    InstanceType,
)
from tests.fakes.ecs.client import GPU_TWO_CARDS, standard_world
from tests.integration.ecs_sdk_support import REGION, expect_error, sdk


@pytest.fixture
async def emu() -> AsyncIterator[EcsEmulator]:
    async with EcsEmulator(standard_world(REGION)) as emulator:
        yield emulator


def create_request(inst, token: str = "", qp: int = 8, **extra) -> m.CreateNetworkInterfaceRequest:
    return m.CreateNetworkInterfaceRequest(
        region_id=REGION,
        v_switch_id=inst.vswitch_id,
        security_group_ids=inst.security_group_ids,
        network_interface_traffic_mode="HighPerformance",
        queue_pair_number=qp,
        client_token=token or None,
        **extra,
    )


async def test_instances_are_found_by_id_and_by_private_ip(emu: EcsEmulator) -> None:
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    emu.world.add_instance(GPU_TWO_CARDS.name)
    client = sdk(emu)
    by_id = await client.describe_instances_async(
        m.DescribeInstancesRequest(region_id=REGION, instance_ids=json.dumps([inst.id]))
    )
    by_ip = await client.describe_instances_async(
        m.DescribeInstancesRequest(
            region_id=REGION, private_ip_addresses=json.dumps([inst.private_ip])
        )
    )
    for resp in (by_id, by_ip):
        [found] = resp.body.instances.instance
        assert found.instance_id == inst.id
        assert found.vpc_attributes.v_switch_id == inst.vswitch_id
        assert found.security_group_ids.security_group_id == inst.security_group_ids


async def test_a_wrong_secret_or_unknown_key_is_refused(emu: EcsEmulator) -> None:
    request = m.DescribeInstancesRequest(region_id=REGION)
    await expect_error(
        sdk(emu, secret="wrong").describe_instances_async(request), "SignatureDoesNotMatch", 400
    )
    await expect_error(
        sdk(emu, key="LTAI-unknown").describe_instances_async(request),
        "InvalidAccessKeyId.NotFound",
        404,
    )


async def test_rpc_v2_signatures_are_verified_too(emu: EcsEmulator) -> None:
    request = m.DescribeInstanceTypesRequest(instance_types=[GPU_TWO_CARDS.name])
    resp = await sdk(emu, signature_algorithm="v2").describe_instance_types_async(request)
    assert resp.body.instance_types.instance_type[0].eri_quantity == 2
    await expect_error(
        sdk(emu, secret="wrong", signature_algorithm="v2").describe_instance_types_async(request),
        "SignatureDoesNotMatch",
        400,
    )


async def test_missing_and_bad_parameters_are_named(emu: EcsEmulator) -> None:
    client = sdk(emu)
    message = await expect_error(
        client.create_network_interface_async(
            m.CreateNetworkInterfaceRequest(region_id=REGION, security_group_ids=["sg-x"])
        ),
        "MissingParameter",
        400,
    )
    assert "VSwitchId" in message
    message = await expect_error(
        client.describe_network_interfaces_async(
            m.DescribeNetworkInterfacesRequest(region_id=REGION, max_results=5000)
        ),
        "InvalidParameter.MaxResults",
        400,
    )
    assert "5000" in message and "[1, 500]" in message
    await expect_error(
        client.describe_instances_async(m.DescribeInstancesRequest(region_id="mars-1")),
        "InvalidRegionId.NotFound",
        404,
    )


async def test_client_token_makes_create_idempotent(emu: EcsEmulator) -> None:
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    client = sdk(emu)
    first = await client.create_network_interface_async(create_request(inst, "tok-1"))
    again = await client.create_network_interface_async(create_request(inst, "tok-1"))
    other = await client.create_network_interface_async(create_request(inst, "tok-2"))
    assert first.body.network_interface_id == again.body.network_interface_id
    assert other.body.network_interface_id != first.body.network_interface_id
    await expect_error(
        client.create_network_interface_async(create_request(inst, "tok-1", qp=4)),
        "IdempotentParameterMismatch",
        400,
    )


async def test_attach_goes_through_attaching_and_enforces_card_rules(emu: EcsEmulator) -> None:
    emu.world.transition_delay = 0.2
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    client = sdk(emu)
    eri = (await client.create_network_interface_async(create_request(inst))).body
    second = (await client.create_network_interface_async(create_request(inst))).body
    third = (await client.create_network_interface_async(create_request(inst))).body

    async def status(eni_id: str) -> str:
        resp = await client.describe_network_interfaces_async(
            m.DescribeNetworkInterfacesRequest(region_id=REGION, network_interface_id=[eni_id])
        )
        return resp.body.network_interface_sets.network_interface_set[0].status

    attach = m.AttachNetworkInterfaceRequest(
        region_id=REGION,
        instance_id=inst.id,
        network_interface_id=eri.network_interface_id,
        network_card_index=1,
    )
    await client.attach_network_interface_async(attach)
    assert await status(eri.network_interface_id) == "Attaching"
    await asyncio.sleep(0.25)
    assert await status(eri.network_interface_id) == "InUse"

    attach.network_interface_id = second.network_interface_id
    await expect_error(
        client.attach_network_interface_async(attach), "InvalidOperation.NetworkCardEriExists", 403
    )
    attach.network_card_index = 5
    message = await expect_error(
        client.attach_network_interface_async(attach), "InvalidParam.NetworkCardIndex", 400
    )
    assert "5" in message
    attach.network_card_index = None  # card 0
    await client.attach_network_interface_async(attach)
    attach.network_interface_id = third.network_interface_id
    attach.network_card_index = 1
    await expect_error(client.attach_network_interface_async(attach), "QuotaExceed.Eri", 403)


async def test_an_eni_in_use_cannot_be_deleted_until_detached(emu: EcsEmulator) -> None:
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    client = sdk(emu)
    eni_id = (
        await client.create_network_interface_async(create_request(inst))
    ).body.network_interface_id
    await client.attach_network_interface_async(
        m.AttachNetworkInterfaceRequest(
            region_id=REGION, instance_id=inst.id, network_interface_id=eni_id, network_card_index=1
        )
    )
    delete = m.DeleteNetworkInterfaceRequest(region_id=REGION, network_interface_id=eni_id)
    await expect_error(
        client.delete_network_interface_async(delete), "InvalidOperation.InvalidEniState", 403
    )
    await client.detach_network_interface_async(
        m.DetachNetworkInterfaceRequest(
            region_id=REGION, instance_id=inst.id, network_interface_id=eni_id
        )
    )
    await client.delete_network_interface_async(delete)
    await expect_error(client.delete_network_interface_async(delete), "InvalidEniId.NotFound", 404)
    primary = m.DetachNetworkInterfaceRequest(
        region_id=REGION, instance_id=inst.id, network_interface_id=inst.primary_eni_id
    )
    await expect_error(
        client.detach_network_interface_async(primary),
        "InvalidOperation.DetachPrimaryEniNotAllowed",
        403,
    )


async def test_both_pagination_styles_cover_every_eni(emu: EcsEmulator) -> None:
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    for _ in range(249):
        emu.world.create_eni(
            vswitch_id=inst.vswitch_id,
            security_group_ids=inst.security_group_ids,
            traffic_mode="Standard",
            queue_pair_number=0,
            tags={"k": "v"},
            client_token="",
        )
    client = sdk(emu)
    seen: list[str] = []
    token = None
    while True:
        resp = await client.describe_network_interfaces_async(
            m.DescribeNetworkInterfacesRequest(region_id=REGION, max_results=100, next_token=token)
        )
        seen += [
            e.network_interface_id for e in resp.body.network_interface_sets.network_interface_set
        ]
        token = resp.body.next_token
        if not token:
            break
    assert len(seen) == 250 == len(set(seen))
    page3 = await client.describe_network_interfaces_async(
        m.DescribeNetworkInterfacesRequest(region_id=REGION, page_size=100, page_number=3)
    )
    assert page3.body.total_count == 250
    assert len(page3.body.network_interface_sets.network_interface_set) == 50
    tagged = await client.describe_network_interfaces_async(
        m.DescribeNetworkInterfacesRequest(
            region_id=REGION,
            page_size=100,
            tag=[m.DescribeNetworkInterfacesRequestTag(key="k", value="v")],
        )
    )
    assert tagged.body.total_count == 249


async def test_rate_limit_and_injected_faults_answer_like_ecs(emu: EcsEmulator) -> None:
    client = sdk(emu)
    request = m.DescribeInstanceTypesRequest()
    emu.faults.inject("DescribeInstanceTypes", "ServiceUnavailable", status=503, times=1)
    await expect_error(client.describe_instance_types_async(request), "ServiceUnavailable", 503)
    emu.faults.throttle("DescribeInstanceTypes", times=1)
    await expect_error(client.describe_instance_types_async(request), "Throttling.User", 400)
    emu.faults.rate_limit = 2
    outcomes = []
    for _ in range(20):
        try:
            await client.describe_instance_types_async(request)
            outcomes.append("ok")
        except AlibabaCloudException as exc:
            outcomes.append(exc.code)
    assert outcomes.count("Throttling.User") >= 10
    assert set(outcomes) == {"ok", "Throttling.User"}
    assert emu.faults.calls["DescribeInstanceTypes"] == 22
    assert emu.faults.errors["Throttling.User"] == outcomes.count("Throttling.User") + 1


async def test_denied_action_is_forbidden_ram(emu: EcsEmulator) -> None:
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    emu.denied_actions.add("DescribeInstanceAttribute")
    await expect_error(
        sdk(emu).describe_instance_attribute_async(
            m.DescribeInstanceAttributeRequest(instance_id=inst.id)
        ),
        "Forbidden.RAM",
        403,
    )


async def test_metadata_service_requires_an_imdsv2_token(emu: EcsEmulator) -> None:
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    mac = emu.world.enis[inst.primary_eni_id].mac
    base = f"{emu.metadata_url}/latest"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base}/meta-data/instance-id") as resp:
            assert resp.status == 401
        async with session.put(f"{base}/api/token") as resp:
            assert resp.status == 400  # TTL header is mandatory
        ttl = {"X-aliyun-ecs-metadata-token-ttl-seconds": "60"}
        async with session.put(f"{base}/api/token", headers=ttl) as resp:
            token = await resp.text()
        headers = {"X-aliyun-ecs-metadata-token": token}
        expected = {
            "region-id": REGION,
            "instance-id": inst.id,
            f"network/interfaces/macs/{mac}/primary-ip-address": inst.private_ip,
            f"network/interfaces/macs/{mac}/vswitch-cidr-block": "10.0.0.0/8",
            f"network/interfaces/macs/{mac}/gateway": "10.0.0.1",
        }
        for path, value in expected.items():
            async with session.get(f"{base}/meta-data/{path}", headers=headers) as resp:
                assert (resp.status, await resp.text()) == (200, value), path
        async with session.get(
            f"{base}/meta-data/network/interfaces/macs/00:00:00:00:00:00/gateway", headers=headers
        ) as resp:
            assert resp.status == 404


async def test_each_instance_reads_its_own_metadata_under_its_path(emu: EcsEmulator) -> None:
    first, second = (emu.world.add_instance(GPU_TWO_CARDS.name) for _ in range(2))
    for inst in (first, second):
        client = MetadataClient(emu.metadata_url_for(inst.id), attempts=1)
        mac = emu.world.enis[inst.primary_eni_id].mac
        assert await client.instance_id() == inst.id
        assert (await client.eni_network(mac)).address == inst.private_ip
    # another instance's card is not in this one's metadata, and an unknown instance has none
    other_mac = emu.world.enis[second.primary_eni_id].mac
    with pytest.raises(MetadataError, match="HTTP 404"):
        await MetadataClient(emu.metadata_url_for(first.id), attempts=1).eni_network(other_mac)
    with pytest.raises(MetadataError, match="HTTP 404"):
        await MetadataClient(emu.metadata_url_for("i-missing"), attempts=1).instance_id()
    # the root path has no single instance to answer for once there are two
    with pytest.raises(MetadataError, match="HTTP 404"):
        await MetadataClient(emu.metadata_url, attempts=1).instance_id()


def test_emulator_on_its_own_thread_serves_synchronous_callers() -> None:
    emulator = EcsEmulator(standard_world(REGION))
    with emulator.in_thread() as emu:
        resp = sdk(emu).describe_instance_types(
            m.DescribeInstanceTypesRequest(instance_types=[GPU_TWO_CARDS.name])
        )
        assert resp.body.instance_types.instance_type[0].network_card_quantity == 2
        assert emu.faults.calls["DescribeInstanceTypes"] == 1


def test_instance_type_presets_are_copied_per_world() -> None:
    first, second = standard_world(), standard_world()
    first.instance_types[GPU_TWO_CARDS.name].eri_quantity = 0
    assert second.instance_types[GPU_TWO_CARDS.name].eri_quantity == 2
    assert isinstance(second.instance_types[GPU_TWO_CARDS.name], InstanceType)


async def test_describe_instances_lists_every_attached_eni(emu: EcsEmulator) -> None:
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    client = sdk(emu)
    created = await client.create_network_interface_async(create_request(inst, "t-1"))
    eni_id = created.body.network_interface_id
    await client.attach_network_interface_async(
        m.AttachNetworkInterfaceRequest(
            region_id=REGION, network_interface_id=eni_id, instance_id=inst.id, network_card_index=1
        )
    )
    resp = await client.describe_instances_async(
        m.DescribeInstancesRequest(region_id=REGION, instance_ids=json.dumps([inst.id]))
    )
    nics = resp.body.instances.instance[0].network_interfaces.network_interface
    assert {(n.network_interface_id, n.type) for n in nics} == {
        (inst.primary_eni_id, "Primary"),
        (eni_id, "Secondary"),
    }
