"""EcsCloud (official SDK) + ERI reconcile passes against the ECS emulator over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from erdma.controller.cloud import (
    CREATOR_TAG_KEY,
    CREATOR_TAG_VALUE,
    INSTANCE_ID_TAG_KEY,
    TERWAY_EXCLUDED_TAG_KEY,
    CloudError,
    owned_tags,
)
from erdma.controller.eri import CARD_INDEX_TAG_KEY, cleanup_eris, client_token, ensure_eris
from erdma.controller.providers.ecs.client import EcsCloud
from erdma.controller.providers.ecs.credentials import (
    resolve_region,
)
from erdma.controller.ratelimit import RetryPolicy
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GENERAL_ERI, GPU_TWO_CARDS, NO_ERI, cloud_for, standard_world


@pytest.fixture
async def emu() -> AsyncIterator[EcsEmulator]:
    async with EcsEmulator(standard_world(transition_delay=0.05)) as emulator:
        yield emulator


async def until_ready(cloud, instance, caps, passes: int = 10, **kwargs):
    """Passes until Ready; each looks the instance (and so its attached ENIs) up again."""
    result = None
    for _ in range(passes):
        instance, _caps = await lookup(cloud, instance.id)
        result = await ensure_eris(cloud, instance, caps, **kwargs)
        if result.ready or not result.supported:
            return result
        await asyncio.sleep(0.06)
    return result


async def lookup(cloud: EcsCloud, instance_id: str):
    instance = await cloud.find_instance(instance_id=instance_id)
    assert instance is not None
    return instance, await cloud.instance_type_caps(instance.instance_type)


def eris_of(emu: EcsEmulator, instance_id: str):
    emu.world.settle()
    return sorted(
        (
            e
            for e in emu.world.enis.values()
            if e.instance_id == instance_id and e.traffic_mode == "HighPerformance"
        ),
        key=lambda e: e.card_index,
    )


async def test_fresh_gpu_instance_gets_one_ready_eri_per_card(emu: EcsEmulator) -> None:
    record = emu.world.add_instance(GPU_TWO_CARDS.name)
    cloud = cloud_for(emu)
    instance, caps = await lookup(cloud, record.id)
    result = await until_ready(cloud, instance, caps)
    assert result.ready
    assert [(d.card_index, d.is_primary, d.queue_pair_number) for d in result.devices] == [
        (0, True, 16),
        (1, False, 16),
    ]
    primary, created = eris_of(emu, record.id)
    assert primary.id == record.primary_eni_id and primary.queue_pair_number == 16
    assert created.status == "InUse" and created.card_index == 1
    assert created.tags[CREATOR_TAG_KEY] == CREATOR_TAG_VALUE
    assert created.tags[INSTANCE_ID_TAG_KEY] == record.id
    assert created.tags[TERWAY_EXCLUDED_TAG_KEY] == "true"
    assert result.devices[1].mac == created.mac


async def test_single_card_instance_converts_only_the_primary(emu: EcsEmulator) -> None:
    record = emu.world.add_instance(GENERAL_ERI.name)
    cloud = cloud_for(emu)
    instance, caps = await lookup(cloud, record.id)
    result = await until_ready(cloud, instance, caps)
    assert result.ready and len(result.devices) == 1 and result.devices[0].is_primary
    assert emu.faults.calls["CreateNetworkInterface"] == 0


async def test_instance_found_by_private_ip_when_id_unknown(emu: EcsEmulator) -> None:
    record = emu.world.add_instance(GENERAL_ERI.name)
    cloud = cloud_for(emu)
    found = await cloud.find_instance(instance_id="i-gone", private_ip=record.private_ip)
    assert found is not None and found.id == record.id
    assert await cloud.find_instance(private_ip="192.0.2.1") is None


async def test_crash_between_create_and_attach_makes_no_duplicate(emu: EcsEmulator) -> None:
    record = emu.world.add_instance(GPU_TWO_CARDS.name)
    cloud = cloud_for(emu)
    instance, caps = await lookup(cloud, record.id)
    # A previous controller process created card 1's ERI with the same request, then died.
    tags = {**owned_tags(record.id), CARD_INDEX_TAG_KEY: "1"}
    orphan = await cloud.create_eri(instance, 1, 16, client_token(record.id, 1, 16), tags)
    result = await until_ready(cloud, instance, caps)
    assert result.ready
    created = [e for e in emu.world.enis.values() if e.type == "Secondary"]
    assert [e.id for e in created] == [orphan.id]
    assert created[0].instance_id == record.id and created[0].card_index == 1


async def test_leftover_from_a_different_request_is_reused_by_tag(emu: EcsEmulator) -> None:
    record = emu.world.add_instance(GPU_TWO_CARDS.name)
    cloud = cloud_for(emu)
    instance, caps = await lookup(cloud, record.id)
    orphan = await cloud.create_eri(instance, 1, 8, "an-older-token", owned_tags(record.id))
    result = await until_ready(cloud, instance, caps)
    assert result.ready
    assert emu.faults.calls["CreateNetworkInterface"] == 1  # only the orphan's
    assert result.devices[1].eni_id == orphan.id


async def test_throttling_storm_is_ridden_out_with_counted_retries(emu: EcsEmulator) -> None:
    record = emu.world.add_instance(GPU_TWO_CARDS.name)
    cloud = cloud_for(emu, retry=RetryPolicy(max_attempts=15, base_delay=0.005, max_delay=0.05))
    emu.faults.throttle("*", times=12)
    instance, caps = await lookup(cloud, record.id)
    result = await until_ready(cloud, instance, caps)
    assert result.ready
    assert cloud.metrics.value("erdma_controller_ecs_retries_total") == 12
    assert emu.faults.errors["Throttling.User"] == 12


async def test_persistent_throttling_leaves_cards_pending_not_failed(emu: EcsEmulator) -> None:
    record = emu.world.add_instance(GPU_TWO_CARDS.name)
    cloud = cloud_for(emu, retry=RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.01))
    instance, caps = await lookup(cloud, record.id)
    emu.faults.throttle("ModifyNetworkInterfaceAttribute", times=100)
    result = await ensure_eris(cloud, instance, caps)
    card0 = result.devices[0]
    assert card0.status == "Pending" and "Throttling.User" in card0.message
    assert "ecsRateLimit" in card0.message  # the hint
    assert emu.faults.calls["ModifyNetworkInterfaceAttribute"] == 2


async def test_server_errors_and_timeouts_are_retried(emu: EcsEmulator) -> None:
    record = emu.world.add_instance(GPU_TWO_CARDS.name)
    cloud = cloud_for(emu, timeout_seconds=0.3)
    instance, caps = await lookup(cloud, record.id)
    emu.faults.inject("CreateNetworkInterface", "ServiceUnavailable", status=503, times=2)
    emu.faults.inject("AttachNetworkInterface", "InternalError", status=500, times=1)
    emu.faults.inject("DescribeNetworkInterfaces", delay=1.0, times=1)
    result = await until_ready(cloud, instance, caps)
    assert result.ready
    retries = {
        action: cloud.metrics.value("erdma_controller_ecs_retries_total", action=action)
        for action in ("CreateNetworkInterface", "AttachNetworkInterface")
    }
    assert retries == {"CreateNetworkInterface": 2, "AttachNetworkInterface": 1}
    describe = "DescribeNetworkInterfaces"
    assert cloud.metrics.value("erdma_controller_ecs_retries_total", action=describe) == 1
    assert len([e for e in emu.world.enis.values() if e.type == "Secondary"]) == 1


async def test_bad_credentials_fail_clearly_and_create_nothing(emu: EcsEmulator) -> None:
    record = emu.world.add_instance(GPU_TWO_CARDS.name)
    before = set(emu.world.enis)
    cloud = cloud_for(emu, access_key_secret="not-the-secret")
    with pytest.raises(CloudError) as info:
        await cloud.find_instance(instance_id=record.id)
    err = info.value
    assert (err.code, err.action, err.retryable) == (
        "SignatureDoesNotMatch",
        "DescribeInstances",
        False,
    )
    assert "accessKeySecret" in str(err) and "not-the-secret" not in str(err)
    assert emu.faults.calls["DescribeInstances"] == 1  # not retried
    unknown = cloud_for(emu, access_key_id="LTAI-nobody")
    with pytest.raises(CloudError, match=r"InvalidAccessKeyId\.NotFound.*accessKeyID"):
        await unknown.create_eri(
            (await cloud_for(emu).find_instance(instance_id=record.id)),  # type: ignore[arg-type]
            1,
            16,
            "t",
            {},
        )
    assert set(emu.world.enis) == before


async def test_type_without_erdma_is_reported_and_untouched(emu: EcsEmulator) -> None:
    record = emu.world.add_instance(NO_ERI.name)
    cloud = cloud_for(emu)
    instance, caps = await lookup(cloud, record.id)
    result = await ensure_eris(cloud, instance, caps)
    assert not result.supported and not result.ready
    assert "no ERI quota" in result.problem
    for action in (
        "CreateNetworkInterface",
        "ModifyNetworkInterfaceAttribute",
        "AttachNetworkInterface",
    ):
        assert emu.faults.calls[action] == 0


async def test_existing_eris_are_adopted_not_recreated(emu: EcsEmulator) -> None:
    record = emu.world.add_instance(GPU_TWO_CARDS.name)
    cloud = cloud_for(emu)
    instance, caps = await lookup(cloud, record.id)
    # Made by someone else (no creator tag) and attached on card 1.
    foreign = emu.world.add_attached_eni(
        record, 1, traffic_mode="HighPerformance", queue_pair_number=16
    )
    refused = await until_ready(cloud, instance, caps)
    assert "manageNonOwnedENIs" in refused.problem and not refused.ready
    adopted = await until_ready(cloud, instance, caps, manage_non_owned=True)
    assert adopted.ready and adopted.devices[1].eni_id == foreign.id
    assert emu.faults.calls["CreateNetworkInterface"] == 0
    # Adoption tags it so Terway leaves it alone, but does not claim it as ours.
    assert foreign.tags[TERWAY_EXCLUDED_TAG_KEY] == "true"
    assert CREATOR_TAG_KEY not in foreign.tags


async def test_listing_follows_every_page_beyond_100(emu: EcsEmulator) -> None:
    many = emu.world.add_instance_type(
        replace(GPU_TWO_CARDS, name="ecs.many-enis", eni_quantity=300)
    )
    record = emu.world.add_instance(many.name)
    for _ in range(140):
        emu.world.add_attached_eni(
            record, 0, traffic_mode="Standard", queue_pair_number=0, tags=owned_tags(record.id)
        )
    # The instance's ERI for card 1 sits on the last page.
    eri = emu.world.add_attached_eni(
        record, 1, traffic_mode="HighPerformance", queue_pair_number=16, tags=owned_tags(record.id)
    )
    cloud = cloud_for(emu)
    listed = await cloud.list_enis(record.id)
    assert len(listed) == 142 and len({e.id for e in listed}) == 142
    assert len(await cloud.list_enis_by_tags(owned_tags(record.id))) == 141
    ids = [e.id for e in listed]
    assert {e.id for e in await cloud.describe_enis(ids)} == set(ids)
    instance, caps = await lookup(cloud, record.id)
    result = await until_ready(cloud, instance, caps)
    assert result.ready and result.devices[1].eni_id == eri.id
    assert emu.faults.calls["CreateNetworkInterface"] == 0


async def test_cleanup_deletes_only_our_eris(emu: EcsEmulator) -> None:
    record = emu.world.add_instance(GPU_TWO_CARDS.name)
    neighbour = emu.world.add_instance(GPU_TWO_CARDS.name)
    cloud = cloud_for(emu)
    for rec in (record, neighbour):
        instance, caps = await lookup(cloud, rec.id)
        assert (await until_ready(cloud, instance, caps)).ready
    foreign = emu.world.add_attached_eni(
        record,
        0,
        traffic_mode="Standard",
        queue_pair_number=0,
        tags={INSTANCE_ID_TAG_KEY: record.id},
    )
    ours = [e.id for e in eris_of(emu, record.id) if e.type == "Secondary"]
    for _ in range(10):
        outcome = await cleanup_eris(cloud, record.id)
        if outcome.done and not outcome.deleted:
            break
        await asyncio.sleep(0.06)
    assert outcome.done and outcome.errors == ()
    assert not set(ours) & set(emu.world.enis)
    assert foreign.id in emu.world.enis and record.primary_eni_id in emu.world.enis
    assert len(eris_of(emu, neighbour.id)) == 2
    # The node comes back (new ERdmaDevice generation): it gets a fresh ERI again.
    instance, caps = await lookup(cloud, record.id)
    again = await until_ready(cloud, instance, caps, token_salt="uid-2")
    assert again.ready and again.devices[1].eni_id not in ours


async def test_client_rate_limit_keeps_under_the_account_limit(emu: EcsEmulator) -> None:
    emu.faults.rate_limit = 20
    cloud = cloud_for(emu, rate_limit=15, burst=1)
    await asyncio.gather(
        *(cloud.instance_type_caps(f"ecs.t{i}") for i in range(30)), return_exceptions=True
    )
    assert emu.faults.calls["DescribeInstanceTypes"] == 30
    assert emu.faults.errors["Throttling.User"] == 0


async def test_jumbo_frame_and_missing_permission(emu: EcsEmulator) -> None:
    record = emu.world.add_instance(GENERAL_ERI.name, jumbo_frame=True)
    cloud = cloud_for(emu)
    assert await cloud.jumbo_frame(record.id) is True
    emu.denied_actions.add("DescribeInstanceAttribute")
    with pytest.raises(CloudError, match="ecs:DescribeInstanceAttribute") as info:
        await cloud.jumbo_frame(record.id)
    assert info.value.code == "Forbidden.RAM" and info.value.http_status == 403


async def test_unknown_instance_type_is_a_clear_error(emu: EcsEmulator) -> None:
    with pytest.raises(CloudError, match=r"ecs\.nope"):
        await cloud_for(emu).instance_type_caps("ecs.nope")


async def test_region_from_metadata_when_not_configured(emu: EcsEmulator) -> None:
    emu.world.add_instance(GENERAL_ERI.name)
    assert await resolve_region("", base_url=emu.metadata_url) == "cn-hangzhou"
    assert await resolve_region("cn-beijing", base_url="http://127.0.0.1:9") == "cn-beijing"


async def test_concurrent_passes_share_their_look_ups(emu: EcsEmulator) -> None:
    """Nodes joining together cost their mutations plus a few shared look-ups, not 6 calls each."""
    ids = [emu.world.add_instance(GENERAL_ERI.name).id for _ in range(30)]
    cloud = cloud_for(emu)

    async def bring_up(instance_id: str) -> bool:
        instance, caps = await lookup(cloud, instance_id)
        return (await ensure_eris(cloud, instance, caps)).ready

    assert all(await asyncio.gather(*(bring_up(i) for i in ids)))
    calls = emu.faults.calls
    assert calls["ModifyNetworkInterfaceAttribute"] == 30  # one conversion per node
    assert calls["DescribeInstances"] == 1  # 30 look-ups by id in one request
    assert calls["DescribeNetworkInterfaces"] <= 2  # a slow machine may split the window
    assert calls["TagResources"] <= 3  # 30 primaries with the same tag
    for instance_id in ids:
        (primary,) = eris_of(emu, instance_id)
        assert primary.tags == {"terway.alibabacloud.com/excluded": "true"}
