"""The simulated node hardware the node-ready benchmark and test_node_join_attach stand on
(`tests.fakes.eri_hotplug`): each ERI is reported once, when ECS has it in use and not before,
and a plugged ERI is what the agent's own scan and netlink code find."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from erdma.host.devices import scan
from erdma.host.netdev import present_macs
from tests.fakes.ecs.client import GPU_TWO_CARDS, standard_world
from tests.fakes.ecs.records import HIGH_PERFORMANCE
from tests.fakes.eri_hotplug import AttachedEri, NodeHardware, node_network, report_attaches
from tests.integration.netns_support import NEEDS_NETNS

pytestmark = NEEDS_NETNS  # the second test; the first runs wherever these do


async def test_each_eri_is_reported_once_when_ecs_has_it_in_use() -> None:
    world = standard_world(transition_delay=0.3)
    inst = world.add_instance(GPU_TWO_CARDS.name)
    other = world.add_instance(GPU_TWO_CARDS.name)
    heard: list[tuple[str, bool]] = []
    reporter = asyncio.create_task(
        report_attaches(world, {inst.id}, lambda e: heard.append((e.eni_id, e.primary)))
    )
    try:
        world.set_traffic_mode(inst.primary_eni_id, HIGH_PERFORMANCE, 16)
        world.set_traffic_mode(other.primary_eni_id, HIGH_PERFORMANCE, 16)  # not watched
        eri = world.create_eni(
            vswitch_id=inst.vswitch_id,
            security_group_ids=inst.security_group_ids,
            traffic_mode=HIGH_PERFORMANCE,
            queue_pair_number=16,
            tags={},
            client_token="",
        )
        world.attach(eri.id, inst.id, 1)
        await asyncio.sleep(0.1)
        assert heard == [(inst.primary_eni_id, True)]  # the attach is still under way
        await asyncio.sleep(0.5)  # nobody reads the ENI: the reporter settles it on time
        assert heard == [(inst.primary_eni_id, True), (eri.id, False)]
    finally:
        reporter.cancel()
        await asyncio.gather(reporter, return_exceptions=True)


def test_a_plugged_eri_is_found_by_the_agents_scan_and_netlink(short_root: Path) -> None:
    world = standard_world()
    inst = world.add_instance(GPU_TWO_CARDS.name)
    hardware = NodeHardware(
        short_root, f"erdma-t-{uuid.uuid4().hex[:8]}", node_network(world, inst.id)
    )
    hardware.create()
    try:
        assert scan(short_root).devices == ()  # nothing before ECS has an ERI in use
        primary_mac = world.enis[inst.primary_eni_id].mac
        hardware.plug(AttachedEri(inst.id, inst.primary_eni_id, primary_mac, True, 0.0))
        hardware.plug(AttachedEri(inst.id, "eni-second", "00:16:3e:aa:00:02", False, 0.0))
        found = {d.name: (d.netdev, d.mac) for d in scan(short_root).devices}
        assert found == {
            "erdma_0": ("eth0", primary_mac),
            "erdma_1": ("eth1", "00:16:3e:aa:00:02"),
        }
        assert present_macs({primary_mac, "00:16:3e:aa:00:02"}, hardware.netns) == {
            primary_mac,
            "00:16:3e:aa:00:02",
        }
    finally:
        hardware.remove()
