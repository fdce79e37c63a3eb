"""What a user sees when one cloud step goes wrong: a card whose create fails, an unreadable
jumbo-frame setting, an account that may not convert the primary ENI.

The production controller runs in-process on the real kube-testserver and the real SDK against
the ECS emulator; the checks read the ERdmaDevice object, the Events and the emulated region.
"""

from __future__ import annotations

import asyncio

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event

from erdma.kube import crd
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.audit import eris_on, leaked, ours
from tests.fakes.ecs.client import GENERAL_ERI, GPU_TWO_CARDS, cloud_for, standard_world
from tests.fakes.ecs.records import PREVIEW_REFUSED_CODE
from tests.integration.controller_rig import running_controller, wait_for_call
from tests.integration.controller_support import add_node, device, eventually, ready_device

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]

VSWITCH_FULL = "InvalidVSwitchId.IpNotEnough"


async def events(client: AsyncClient, name: str) -> list[tuple[str, str, str]]:
    found = client.list(Event, namespace="default", fields={"involvedObject.name": name})
    return [(e.type or "", e.reason or "", e.message or "") async for e in found]


async def test_a_card_whose_create_fails_keeps_the_object_from_reading_ready(kube_api, emu, k8s):
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    message = "The specified VSwitch does not have enough IP addresses."
    emu.faults.inject("CreateNetworkInterface", VSWITCH_FULL, status=403, message=message, times=4)
    seen: list[dict] = []
    async with running_controller(kube_api.kubeconfig, cloud_for(emu)):
        name = await add_node(k8s, inst)

        async def partial() -> dict | None:
            obj = await device(k8s, name)
            if obj is not None and obj.get("status"):
                seen.append(obj)
            return obj if emu.faults.calls["CreateNetworkInterface"] >= 3 and obj else None

        obj = await eventually(partial)
        whole = await eventually(lambda: ready_device(k8s, name))  # the vSwitch has room again

    assert all(not crd.parse(o).all_ready for o in seen)
    assert {o["status"]["ready"] for o in seen} <= {"0/2"}
    (card0,) = crd.parse(obj).statuses
    assert card0.status == crd.PENDING
    assert "network card 1 has no ERI yet" in card0.message and VSWITCH_FULL in card0.message
    assert whole["status"]["ready"] == "2/2" and len(whole["spec"]["devices"]) == 2


@pytest.mark.parametrize(
    ("code", "status"), [("Throttling.User", 400), ("ServiceUnavailable", 503)]
)
async def test_a_failed_jumbo_frame_read_keeps_the_known_setting(kube_api, emu, k8s, code, status):
    inst = emu.world.add_instance(GENERAL_ERI.name, jumbo_frame=True)
    async with running_controller(kube_api.kubeconfig, cloud_for(emu)):
        name = await add_node(k8s, inst)
        ready = await eventually(lambda: ready_device(k8s, name))
        assert ready["spec"]["jumboFrame"] is True

        emu.faults.inject("DescribeInstanceAttribute", code, status=status, times=10_000)
        reads = emu.faults.calls["DescribeInstanceAttribute"]
        await wait_for_call(emu, "DescribeInstanceAttribute", count=reads + 12)  # two passes
        after = await device(k8s, name)
        told = await events(k8s, name)
    assert after is not None and after["spec"]["jumboFrame"] is True
    assert crd.parse(after).all_ready
    assert any(m.startswith("cannot read jumbo-frame setting, keeping True") for _, _, m in told)


async def test_a_new_object_corrects_its_jumbo_guess_as_soon_as_ecs_answers(kube_api, emu, k8s):
    inst = emu.world.add_instance(GENERAL_ERI.name, jumbo_frame=True)
    emu.faults.inject("DescribeInstanceAttribute", "ServiceUnavailable", status=503, times=6)
    cloud = cloud_for(emu)
    async with running_controller(kube_api.kubeconfig, cloud, reverifyIntervalSeconds=120):
        name = await add_node(k8s, inst)

        async def jumbo_on() -> dict | None:
            obj = await ready_device(k8s, name)
            return obj if obj and obj["spec"]["jumboFrame"] else None

        await eventually(jumbo_on, timeout=10)
    assert emu.faults.errors["ServiceUnavailable"] == 6


def refuse_by_preview(emu) -> None:
    emu.world.refuse_traffic_config()


def refuse_by_ram(emu) -> None:
    emu.denied_actions.add("ModifyNetworkInterfaceAttribute")


@pytest.mark.parametrize("instance_type", [GPU_TWO_CARDS.name, GENERAL_ERI.name])
@pytest.mark.parametrize(
    ("refuse", "code"),
    [(refuse_by_preview, PREVIEW_REFUSED_CODE), (refuse_by_ram, "Forbidden.RAM")],
    ids=["preview-parameter-refused", "permission-missing"],
)
async def test_a_refused_primary_conversion_gets_card_0_a_new_eri(
    kube_api, emu, k8s, instance_type, refuse, code
):
    inst = emu.world.add_instance(instance_type)
    refuse(emu)
    async with running_controller(kube_api.kubeconfig, cloud_for(emu)):
        name = await add_node(k8s, inst)
        obj = await eventually(lambda: ready_device(k8s, name))
        await asyncio.sleep(1.0)  # more passes: nothing is converted or created again
        told = await events(k8s, name)
    cards = {d.network_card_index: d for d in crd.parse(obj).devices}
    assert not cards[0].is_primary_eni and cards[0].id != inst.primary_eni_id
    assert emu.world.enis[inst.primary_eni_id].traffic_mode == "Standard"
    assert eris_on(emu.world, inst.id) == {i: d.id for i, d in cards.items()}
    assert len(ours(emu.world, inst.id)) == len(cards) and leaked(emu.world) == []
    refused = [m for _, r, m in told if r == "PrimaryENIConversionRefused"]
    assert refused and code in refused[0]
    assert emu.faults.calls["ModifyNetworkInterfaceAttribute"] == 1


async def test_the_jumbo_frame_is_read_once_per_bring_up_and_again_at_reverify(kube_api, k8s):
    """DescribeInstanceAttribute has no batch form: the passes while an ERI attaches reuse the
    first read; the Ready re-verify reads again, so a setting changed in ECS is followed."""
    with EcsEmulator(standard_world(transition_delay=1.0)).in_thread() as emu:
        inst = emu.world.add_instance(GPU_TWO_CARDS.name, jumbo_frame=True)
        async with running_controller(
            kube_api.kubeconfig, cloud_for(emu), reverifyIntervalSeconds=3
        ):
            name = await add_node(k8s, inst)
            ready = await eventually(lambda: ready_device(k8s, name))
            passes = emu.faults.calls["DescribeNetworkInterfaces"]
            assert ready["spec"]["jumboFrame"] is True
            assert emu.faults.calls["DescribeInstanceAttribute"] == 1 and passes >= 3

            with emu.world.lock:
                inst.jumbo_frame = False

            async def jumbo_off() -> dict | None:
                obj = await device(k8s, name)
                return obj if obj and obj["spec"]["jumboFrame"] is False else None

            await eventually(jumbo_off, timeout=10)
        assert emu.faults.calls["DescribeInstanceAttribute"] == 2


async def test_an_attaching_eri_is_rechecked_soon_then_less_often(kube_api, k8s):
    """An ERI that attaches in 2 s is Ready through the attach rechecks (0.25-0.5 s after the
    attaching pass, each further one 1.5 times as late), not through `pendingRequeueSeconds`:
    with that set to an hour, the Node is Ready at all only if the short rechecks ran. And the
    Node is not polled every quarter second meanwhile: at most 5 look-ups in all (a loaded
    machine makes fewer, never more). The intervals themselves are tested in test_streaks.py."""
    with EcsEmulator(standard_world(transition_delay=2.0)).in_thread() as emu:
        inst = emu.world.add_instance(GPU_TWO_CARDS.name)
        async with running_controller(
            kube_api.kubeconfig, cloud_for(emu), pendingRequeueSeconds=3600.0
        ):
            name = await add_node(k8s, inst)
            await eventually(lambda: ready_device(k8s, name), timeout=60.0)
        looks = emu.faults.calls["DescribeInstances"]
    assert 2 <= looks <= 5, f"{looks} look-ups: create + attach, up to three attaching, Ready"
