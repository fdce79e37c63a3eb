"""Allocate over gRPC answers what the plugin answers now, also where the encoding is kept.

A plugin that hands out kept answers (`answers_kept`) has each one encoded once; kubelet must
still get the new answer the moment the plugin's changes (a host that lost rdma_cm), and a
plugin that does not declare it must never get a kept encoding, even of an object it reuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry

from erdma.agent.erdma import ErdmaPlugin, ErdmaPolicy
from erdma.api.names import ERDMA_RESOURCE
from erdma.deviceplugin.manager import PluginManager
from erdma.deviceplugin.plugin import ContainerAllocation, PluginDevice, ResourcePlugin
from erdma.deviceplugin.servicer import KEPT_ENCODINGS
from erdma.host.devices import scan
from erdma.sim import fakehost
from erdma.sim.kubelet import FakeKubelet


def serving(kubelet_root: Path, plugin: ResourcePlugin) -> PluginManager:
    return PluginManager([plugin], kubelet_root=kubelet_root, registry=CollectorRegistry())


async def listed(kubelet: FakeKubelet, resource: str, count: int) -> None:
    await kubelet.wait_for(
        lambda: len(kubelet.latest(resource) or {}) == count, 5, f"{count} IDs listed"
    )


async def host_paths(kubelet: FakeKubelet, resource: str, device_id: str) -> list[str]:
    response = await kubelet.allocate(resource, [device_id])
    return [d.host_path for d in response.container_responses[0].devices]


async def envs(kubelet: FakeKubelet, resource: str, device_id: str) -> dict[str, str]:
    response = await kubelet.allocate(resource, [device_id])
    return dict(response.container_responses[0].envs)


async def test_an_erdma_answer_follows_a_host_that_changed(kubelet, kubelet_root, short_root):
    host = fakehost.build(short_root / "host", "default")
    plugin = ErdmaPlugin(ErdmaPolicy(slots_per_device=4))
    plugin.update(scan(short_root / "host"))
    async with serving(kubelet_root, plugin):
        await listed(kubelet, ERDMA_RESOURCE, 8)
        first = await host_paths(kubelet, ERDMA_RESOURCE, "erdma_0/0")
        assert first[-1] == "/dev/infiniband/rdma_cm"
        assert await host_paths(kubelet, ERDMA_RESOURCE, "erdma_0/3") == first  # same device
        assert await host_paths(kubelet, ERDMA_RESOURCE, "erdma_1/0") == [
            "/dev/infiniband/uverbs1",
            "/dev/infiniband/rdma_cm",
        ]
        host.remove_node("/dev/infiniband/rdma_cm")
        plugin.update(scan(short_root / "host"))
        assert await host_paths(kubelet, ERDMA_RESOURCE, "erdma_0/1") == ["/dev/infiniband/uverbs0"]


class ReusingPlugin(ResourcePlugin):
    """Answers every container with one object it changes in place between calls: allowed,
    as it does not declare `answers_kept`."""

    resource_name = "example.com/reusing"
    socket_stem = "reusing"

    def __init__(self) -> None:
        self.answer = ContainerAllocation(envs={"CALL": "0"})

    def devices(self) -> Sequence[PluginDevice]:
        return [PluginDevice("r0"), PluginDevice("r1")]

    def allocate(self, container_requests: Sequence[Sequence[str]]) -> list[ContainerAllocation]:
        self.answer.envs["CALL"] = str(int(self.answer.envs["CALL"]) + 1)
        return [self.answer for _ in container_requests]


async def test_a_plugin_that_reuses_one_object_gets_its_current_content(kubelet, kubelet_root):
    plugin = ReusingPlugin()
    async with serving(kubelet_root, plugin):
        await listed(kubelet, plugin.resource_name, 2)
        calls = [(await envs(kubelet, plugin.resource_name, "r0"))["CALL"] for _ in range(3)]
        assert calls == ["1", "2", "3"]


class KeepingPlugin(ResourcePlugin):
    """One kept answer per device, more devices than a servicer keeps encodings of."""

    resource_name = "example.com/keeping"
    socket_stem = "keeping"
    answers_kept = True

    def __init__(self, count: int) -> None:
        self.answers = {
            f"k{n}": ContainerAllocation(envs={"DEVICE": f"k{n}"}) for n in range(count)
        }

    def devices(self) -> Sequence[PluginDevice]:
        return [PluginDevice(name) for name in self.answers]

    def allocate(self, container_requests: Sequence[Sequence[str]]) -> list[ContainerAllocation]:
        return [self.answers[ids[0]] for ids in container_requests]


async def test_more_kept_answers_than_encodings_kept_each_answer_their_device(
    kubelet, kubelet_root
):
    count = KEPT_ENCODINGS + 6
    plugin = KeepingPlugin(count)
    async with serving(kubelet_root, plugin):
        await listed(kubelet, plugin.resource_name, count)
        for _ in range(2):  # the second pass finds some encodings kept and some dropped
            for name in plugin.answers:
                assert await envs(kubelet, plugin.resource_name, name) == {"DEVICE": name}
        two = await kubelet.allocate(plugin.resource_name, [["k1"], ["k0"]])
        assert [dict(c.envs) for c in two.container_responses] == [
            {"DEVICE": "k1"},
            {"DEVICE": "k0"},
        ]
