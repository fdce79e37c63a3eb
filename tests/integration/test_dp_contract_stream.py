"""Issue 13 items 4 and 7: the ListAndWatch stream survives bad data and oversized lists.

One device's garbage sysfs value must cost at most that device's topology (or the device),
never the stream that carries every device of the resource; and a list too large for kubelet's
4 MiB receive limit must be refused with a reason instead of vanishing on the wire.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from erdma.agent.erdma import ErdmaPlugin, ErdmaPolicy
from erdma.api.names import ERDMA_RESOURCE
from erdma.deviceplugin.lifecycle import Timing
from erdma.deviceplugin.manager import PluginManager
from erdma.deviceplugin.plugin import ContainerAllocation, PluginDevice, ResourcePlugin
from erdma.host.devices import scan
from erdma.sim import fakehost, fakehost_specs
from erdma.sim.kubelet import FakeKubelet

TOY = "example.com/toy"
HUGE = "999999999999999999999"  # wider than int64, the type of NUMANode.ID on the wire


@pytest.fixture(autouse=True)
def _log_everything(caplog):
    caplog.set_level(logging.DEBUG, logger="erdma")


class ListPlugin(ResourcePlugin):
    """Serves whatever list a test sets."""

    resource_name = TOY
    socket_stem = "toy"

    def __init__(self, devices: Sequence[PluginDevice]) -> None:
        self.current = list(devices)

    def devices(self) -> Sequence[PluginDevice]:
        return self.current

    def set(self, devices: Sequence[PluginDevice]) -> None:
        self.current = list(devices)
        self.notify_changed()

    def allocate(self, container_requests: Sequence[Sequence[str]]) -> list[ContainerAllocation]:
        return [ContainerAllocation() for _ in container_requests]


def manager(kubelet_root: Path, plugin: ResourcePlugin, **kwargs: object) -> PluginManager:
    return PluginManager(
        [plugin],
        kubelet_root=kubelet_root,
        registry=CollectorRegistry(),
        **kwargs,  # type: ignore[arg-type]
    )


def numa_of(kubelet: FakeKubelet, resource: str) -> dict[str, list[int]]:
    stream = kubelet.endpoint(resource).stream
    assert stream is not None and stream.messages
    return {d.ID: [n.ID for n in d.topology.nodes] for d in stream.messages[-1].devices}


async def test_bad_numa_node_in_sysfs_does_not_end_the_stream(kubelet, kubelet_root, short_root):
    root = short_root / "host"
    fakehost.build(root, "default")
    numa_file = root / "sys" / "class" / "infiniband" / "erdma_1" / "device" / "numa_node"
    numa_file.write_text(f"{HUGE}\n")
    plugin = ErdmaPlugin(ErdmaPolicy(slots_per_device=2))
    plugin.update(scan(root))
    async with manager(kubelet_root, plugin):
        await kubelet.wait_for(lambda: kubelet.latest(ERDMA_RESOURCE) is not None, 5, "a list")
        stream = kubelet.endpoint(ERDMA_RESOURCE).stream
        assert stream is not None
        assert stream.error is None and stream.open
        assert numa_of(kubelet, ERDMA_RESOURCE) == {
            "erdma_0/0": [0],
            "erdma_0/1": [0],
            "erdma_1/0": [],  # no trustworthy affinity, still offered
            "erdma_1/1": [],
        }
        numa_file.write_text("1\n")  # fixed: back with its topology after one rescan
        plugin.update(scan(root))
        await kubelet.wait_for(
            lambda: numa_of(kubelet, ERDMA_RESOURCE).get("erdma_1/0") == [1], 5, "topology back"
        )
        assert stream.open and kubelet.endpoint(ERDMA_RESOURCE).stream is stream


def test_bad_numa_node_is_a_logged_note_once(short_root, caplog):
    root = short_root / "host"
    fakehost.build(root, "default")
    numa_file = root / "sys" / "class" / "infiniband" / "erdma_1" / "device" / "numa_node"
    numa_file.write_text(f"{HUGE}\n")
    snapshot = scan(root)
    (device,) = [d for d in snapshot.devices if d.name == "erdma_1"]
    assert device.numa_node is None
    assert any(HUGE in note for note in device.notes)
    plugin = ErdmaPlugin(ErdmaPolicy(slots_per_device=1))
    for _ in range(3):
        plugin.update(scan(root))
    notes = [
        r
        for r in caplog.records
        if getattr(r, "device", None) == "erdma_1" and HUGE in str(getattr(r, "notes", ""))
    ]
    assert len(notes) == 1


async def test_a_device_the_wire_cannot_carry_is_left_out_not_fatal(kubelet, kubelet_root, caplog):
    plugin = ListPlugin([PluginDevice("t0"), PluginDevice("t1", numa_nodes=(int(HUGE),))])
    async with manager(kubelet_root, plugin):
        await kubelet.wait_for(lambda: kubelet.latest(TOY) == {"t0": "Healthy"}, 5, "t0 only")
        stream = kubelet.endpoint(TOY).stream
        assert stream is not None and stream.open and stream.error is None
        reasons = [r.reason for r in caplog.records if r.msg == "device left out of the list"]
        assert reasons and "int64" in reasons[0]
        plugin.set([PluginDevice("t0"), PluginDevice("t1", numa_nodes=(1,))])
        await kubelet.wait_for(
            lambda: kubelet.latest(TOY) == {"t0": "Healthy", "t1": "Healthy"}, 5, "t1 back"
        )
        assert kubelet.endpoint(TOY).stream is stream


# -- item 7: lists over kubelet's 4 MiB ------------------------------------------------------


def big_list(devices: int, slots: int) -> list[PluginDevice]:
    return [
        PluginDevice(f"erdma_{d}/{s}", True, (d % 2,)) for d in range(devices) for s in range(slots)
    ]


async def test_a_list_over_four_mib_is_refused_with_its_size_and_the_stream_lives(
    kubelet, kubelet_root, caplog
):
    plugin = ListPlugin(big_list(16, 10_000))
    async with manager(kubelet_root, plugin, timing=Timing(resend_interval=0.2)):
        await kubelet.wait_for(
            lambda: kubelet.registered(TOY) and kubelet.endpoint(TOY).stream is not None,
            5,
            "a stream",
        )
        stream = kubelet.endpoint(TOY).stream
        assert stream is not None

        def limit_errors() -> list[str]:
            return [
                r.getMessage()
                for r in caplog.records
                if r.levelno >= logging.ERROR and "4194304" in r.getMessage()
            ]

        await kubelet.wait_for(lambda: bool(limit_errors()), 5, "an error naming the limit")
        await asyncio.sleep(0.5)  # two periodic re-sends of the same list: no new line
        (error,) = limit_errors()
        assert "160000 IDs" in error and "bytes" in error and "\n" not in error
        assert kubelet.latest(TOY) is None  # nothing half-sent
        assert stream.error is None, stream.error  # kubelet never got an oversized message
        plugin.set(big_list(2, 3))  # a list that fits goes through on the same stream
        await kubelet.wait_for(lambda: len(kubelet.latest(TOY) or {}) == 6, 5, "the small list")
        assert kubelet.endpoint(TOY).stream is stream and stream.open


def sixteen_erdma_host(root: Path) -> None:
    netdevs = [fakehost_specs.PRIMARY]
    rdma = []
    for i in range(16):
        pci = f"0000:{0x10 + i:02x}:07.0"
        netdevs.append(fakehost_specs.FakeNetdev(f"eth{i + 1}", f"00:16:3e:2f:40:{i:02x}", pci))
        rdma.append(fakehost_specs.FakeRdma(f"erdma_{i}", pci, f"eth{i + 1}", numa=i % 2, uverbs=i))
    fakehost.build(root, fakehost_specs.HostSpec(netdevs=tuple(netdevs), rdma=tuple(rdma)))


def test_erdma_plugin_refuses_sixteen_devices_of_ten_thousand_slots(short_root, caplog):
    sixteen_erdma_host(short_root / "host")
    snapshot = scan(short_root / "host")
    assert len(snapshot.erdma_devices) == 16
    plugin = ErdmaPlugin(ErdmaPolicy(slots_per_device=10_000))
    for _ in range(3):  # every rescan: still refused, logged once
        plugin.update(snapshot)
    assert plugin.devices() == ()  # refused, not truncated
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    (error,) = errors
    assert "4194304" in error and "slotsPerDevice" in error and "10000" in error
    assert "\n" not in error
    size = int(error.split(" bytes")[0].rsplit(" ", 1)[-1])
    assert size > 4 * 1024 * 1024
    fits = ErdmaPlugin(ErdmaPolicy(slots_per_device=200))  # the default fits
    fits.update(snapshot)
    assert len(fits.devices()) == 16 * 200
