"""Local mode brings the selected ERIs' netdevs up from instance metadata, in a real namespace.

The namespace (conftest_netns) gets the MACs of an emulated instance: ``eth0`` is its primary
ENI, ``eri0`` a secondary ERI; a fixture host has one erdma device on each. The ECS emulator
serves instance metadata, so the addresses checked are the ones the VPC assigned.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from erdma.agent.config import build_config
from erdma.agent.exposure import Exposure
from erdma.agent.local import follow_local
from erdma.agent.service import Agent
from erdma.aio import Backoff
from erdma.host.devices import scan
from erdma.host.metadata import MetadataClient, MetadataError
from erdma.host.netns import enter
from erdma.sim import fakehost
from erdma.sim.fakehost_specs import FakeNetdev, FakeRdma, HostSpec
from erdma.sim.kubelet import FakeKubelet
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GPU_TWO_CARDS, standard_world
from tests.fakes.ecs.records import EniRecord
from tests.integration.netns_support import (
    NEEDS_NETNS,
    inet_addresses,
    ip,
    ipj,
    link,
    path,
    routes_via,
)
from tests.waiting import until

pytest_plugins = ["tests.integration.conftest_netns"]

pytestmark = NEEDS_NETNS

NOT_UP = "is Ready but its netdev is not up yet"


@dataclass
class Node:
    """An emulated instance whose primary ENI and ERI are the namespace's eth0 and eri0."""

    netns: str
    emu: EcsEmulator
    primary_mac: str
    eri: EniRecord
    host_root: Path
    exposed: list[frozenset[str]] = field(default_factory=list)

    def metadata(self) -> MetadataClient:
        return MetadataClient(self.emu.metadata_url, attempts=1, backoff=0.01)

    def state(self, dev: str) -> tuple[object, ...]:
        """What a reconfiguration would change: addresses, routes and MTU of ``dev``."""
        return (
            inet_addresses(self.netns, dev),
            routes_via(self.netns, dev),
            link(self.netns, dev)["mtu"],
        )

    async def follow(self) -> asyncio.Task[None]:
        """Local mode's loop over the fixture host, every device selected, fast retries."""
        every = Exposure(None, "exposedLocalERIs is empty: every device is exposed")

        def expose(exposure: Exposure) -> None:
            assert exposure.macs is not None
            self.exposed.append(exposure.macs)

        return asyncio.create_task(
            follow_local(
                lambda: (every, scan(self.host_root)),
                expose,
                self.metadata(),
                0.02,
                netns=path(self.netns),
                retry=Backoff(0.05, 0.1),
            )
        )

    async def follow_until(self, macs: set[str]) -> None:
        """Run Local mode's loop until it exposes ``macs``, then stop it."""
        task = await self.follow()
        try:
            await self.wait_exposed(macs)
        finally:
            task.cancel()

    async def wait_exposed(self, macs: set[str], timeout: float = 60.0) -> None:
        await until(
            lambda: bool(self.exposed) and self.exposed[-1] == macs,
            timeout,
            f"exposed {sorted(macs)}; saw {self.exposed}",
        )


def host_spec(primary_mac: str, eri_mac: str) -> HostSpec:
    """erdma_0 on the primary ENI (an ERI too), erdma_1 on the secondary ERI."""
    return HostSpec(
        netdevs=(
            FakeNetdev("eth0", primary_mac, "0000:00:05.0"),
            FakeNetdev("eri0", eri_mac, "0000:00:06.0"),
        ),
        rdma=(
            FakeRdma("erdma_0", "0000:00:07.0", "eth0", numa=0, uverbs=0),
            FakeRdma("erdma_1", "0000:80:07.0", "eri0", numa=1, uverbs=1),
        ),
    )


@pytest.fixture
async def node(netns: str, tmp_path: Path) -> AsyncIterator[Node]:
    world = standard_world()
    inst = world.add_instance(GPU_TWO_CARDS.name, jumbo_frame=True)
    eri = world.add_attached_eni(inst, 1, traffic_mode="HighPerformance", queue_pair_number=16)
    primary_mac = world.enis[inst.primary_eni_id].mac
    ip(netns, "link", "set", "eth0", "address", primary_mac)
    ip(netns, "link", "set", "eri0", "address", eri.mac)
    fakehost.build(tmp_path / "host", host_spec(primary_mac, eri.mac))
    with EcsEmulator(world).in_thread() as emu:
        emu.metadata_instance_id = inst.id
        yield Node(netns, emu, primary_mac, eri, tmp_path / "host")


async def test_down_eri_is_configured_and_the_primary_left_alone(node, caplog):
    caplog.set_level(logging.INFO)
    ip(node.netns, "link", "set", "eri0", "mtu", "4000")
    primary_before = node.state("eth0")

    await node.follow_until({node.primary_mac, node.eri.mac})

    info = link(node.netns, "eri0")
    assert "UP" in info["flags"]
    assert info["mtu"] == 4000  # Local mode does not know about jumbo frames: MTU kept
    assert inet_addresses(node.netns, "eri0") == [f"{node.eri.private_ip}/8"]  # 10.0.0.0/8
    routes = {(r["dst"], r.get("gateway"), r["metric"]) for r in routes_via(node.netns, "eri0")}
    assert routes == {("10.0.0.0/8", None, 200), ("default", "10.0.0.1", 301)}
    assert node.state("eth0") == primary_before
    assert node.exposed == [frozenset({node.primary_mac, node.eri.mac})]  # once, when up


async def test_configured_netdev_is_untouched(node, caplog):
    ip(node.netns, "link", "set", "eri0", "mtu", "1400", "up")
    ip(node.netns, "addr", "add", "10.9.9.9/24", "dev", "eri0")
    before = node.state("eri0")

    await node.follow_until({node.primary_mac, node.eri.mac})

    assert node.state("eri0") == before
    assert f"not with the VPC address {node.eri.private_ip}" in caplog.text


async def test_metadata_outage_is_logged_once_retried_and_recovers(node, caplog):
    node.emu.metadata_instance_id = "i-notyet"  # every metadata path answers 404 meanwhile
    task = await node.follow()
    try:
        await node.wait_exposed(set())
        await asyncio.sleep(1.0)  # about ten retries at 0.05-0.1 s
        assert caplog.text.count("cannot tell the primary ENI from metadata") == 1
        assert "HTTP 404" in caplog.text
        assert "UP" not in link(node.netns, "eri0")["flags"]

        node.emu.metadata_instance_id = node.eri.instance_id  # the selection did not change:
        await node.wait_exposed({node.primary_mac, node.eri.mac})  # only a retry brings it up
    finally:
        task.cancel()
    assert inet_addresses(node.netns, "eri0") == [f"{node.eri.private_ip}/8"]


async def test_malformed_cidr_hides_only_that_eri_and_names_the_value(node, caplog):
    vswitch = node.emu.world.vswitches[node.eri.vswitch_id]
    vswitch.cidr = "10.0.0.0/99"
    task = await node.follow()
    try:
        await node.wait_exposed({node.primary_mac})  # the primary ENI needs no bring-up
        await asyncio.sleep(0.5)
        message = (
            f"metadata network/interfaces/macs/{node.eri.mac}/vswitch-cidr-block is "
            "'10.0.0.0/99', not a CIDR such as 10.0.0.0/24"
        )
        assert caplog.text.count(message) == 1 and caplog.text.count(NOT_UP) == 1
        assert "UP" not in link(node.netns, "eri0")["flags"]

        vswitch.cidr = "10.0.0.0/8"
        await node.wait_exposed({node.primary_mac, node.eri.mac})
    finally:
        task.cancel()


async def test_a_cidr_without_prefix_is_refused(node):
    node.emu.world.vswitches[node.eri.vswitch_id].cidr = "10.0.0.0"
    with pytest.raises(MetadataError, match=r"vswitch-cidr-block is '10.0.0.0', not a CIDR"):
        await node.metadata().eni_network(node.eri.mac)


async def test_device_outside_the_namespace_is_exposed_without_metadata(node, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    node.emu.metadata_instance_id = "i-notyet"
    ip(node.netns, "link", "del", "eri0")  # the ERI's netdev now lives elsewhere
    task = await node.follow()
    try:
        # eth0 is here and the primary ENI is not known yet: only the ERI elsewhere is exposed
        await node.wait_exposed({node.eri.mac})
        ip(node.netns, "link", "del", "eth0")
        await node.wait_exposed({node.primary_mac, node.eri.mac})
    finally:
        task.cancel()
    assert "exposed without configuring it" in caplog.text


async def test_agent_in_local_mode_advertises_the_eri_once_its_netdev_is_up(node, short_root):
    """The whole agent: its netlink work runs on threads inside the test namespace."""
    kubelet = FakeKubelet(short_root / "kubelet" / "device-plugins")
    await kubelet.start()
    threads = ThreadPoolExecutor(4, initializer=enter, initargs=(path(node.netns),))
    asyncio.get_running_loop().set_default_executor(threads)
    flags = {
        "host_root": node.host_root,
        "kubelet_dir": short_root / "kubelet",
        "local_eri_discovery": True,
        "metadata_url": node.emu.metadata_url,
        "metrics_port": 0,
        "rescan_interval": 0.1,
        "prepare_node": False,
        "slots_per_device": 2,
    }
    stop = asyncio.Event()
    running = asyncio.create_task(Agent(build_config(environ={}, flags=flags)).run(stop))
    try:
        slots = ["erdma_0/0", "erdma_0/1", "erdma_1/0", "erdma_1/1"]
        listed = lambda: sorted(kubelet.latest("aliyun/erdma") or {}) == slots  # noqa: E731
        await until(listed, 20, "both devices listed")
    finally:
        stop.set()
        await running
        await kubelet.stop()
    assert "UP" in link(node.netns, "eri0")["flags"]
    assert inet_addresses(node.netns, "eri0") == [f"{node.eri.private_ip}/8"]
    assert ipj(node.netns, "route", "show", "default", "dev", "eri0")[0]["gateway"] == "10.0.0.1"
