"""Issue 13 item 8: Allocate and GetPreferredAllocation follow the kubelet contract over gRPC.

Kubelet only ever sends IDs it got from ListAndWatch; anything else (a slot out of range, a
string without a slash, an empty ID, a repeat, an unhealthy or unexposed device) means a
stale or broken caller and must be refused with INVALID_ARGUMENT naming the ID, never answered
with some device's uverbs node.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest
from prometheus_client import CollectorRegistry

from erdma.agent.erdma import ErdmaPlugin, ErdmaPolicy
from erdma.agent.exposure import parse_rules, select
from erdma.api.names import ERDMA_RESOURCE
from erdma.deviceplugin.manager import PluginManager
from erdma.deviceplugin.plugin import ContainerAllocation, PluginDevice, ResourcePlugin
from erdma.host.devices import scan
from erdma.sim import fakehost
from erdma.sim.kubelet import FakeKubelet

SLOTS = 4


@pytest.fixture(autouse=True)
def _log_everything(caplog):
    caplog.set_level(logging.DEBUG, logger="erdma")


def erdma_plugin(root: Path, **policy: object) -> ErdmaPlugin:
    plugin = ErdmaPlugin(ErdmaPolicy(slots_per_device=SLOTS, **policy))  # type: ignore[arg-type]
    plugin.update(scan(root))
    return plugin


def manager(kubelet_root: Path, plugin: ErdmaPlugin) -> PluginManager:
    return PluginManager([plugin], kubelet_root=kubelet_root, registry=CollectorRegistry())


async def listed(kubelet: FakeKubelet, count: int) -> dict[str, str]:
    await kubelet.wait_for(
        lambda: len(kubelet.latest(ERDMA_RESOURCE) or {}) == count, 5, f"{count} IDs listed"
    )
    latest = kubelet.latest(ERDMA_RESOURCE)
    assert latest is not None
    return latest


async def refused(kubelet: FakeKubelet, ids: list[list[str]]) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await kubelet.allocate(ERDMA_RESOURCE, ids)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, error.value.details()
    return error.value.details() or ""


@pytest.mark.parametrize(
    ("ids", "named"),
    [
        ([["erdma_0/99999"]], "'erdma_0/99999'"),  # a real device, a slot never advertised
        ([["erdma_0/4"]], "'erdma_0/4'"),  # one past the last slot
        ([["erdma_0/-1"]], "'erdma_0/-1'"),
        ([["erdma_0"]], "'erdma_0'"),  # no slash: the device name itself
        ([["erdma_0/"]], "'erdma_0/'"),
        ([[""]], "''"),
        ([["erdma_0/01"]], "'erdma_0/01'"),  # same number, not the advertised spelling
        ([["erdma_0/1", "erdma_0/1"]], "'erdma_0/1'"),  # one ID twice in a container
        ([["erdma_0/1"], ["erdma_0/1"]], "'erdma_0/1'"),  # one ID in two containers
        ([["erdma_0/0", "erdma_9/0"]], "'erdma_9/0'"),
    ],
)
async def test_allocate_refuses_ids_never_advertised(kubelet, kubelet_root, short_root, ids, named):
    fakehost.build(short_root / "host", "default")
    async with manager(kubelet_root, erdma_plugin(short_root / "host")):
        await listed(kubelet, 2 * SLOTS)
        details = await refused(kubelet, ids)
        assert named in details
        assert "erdma_0/" in details and "erdma_1/" in details  # what is advertised
        # the advertised IDs still allocate afterwards
        response = await kubelet.allocate(ERDMA_RESOURCE, ["erdma_0/3"])
        first = response.container_responses[0].devices[0]
        assert first.host_path == "/dev/infiniband/uverbs0"


async def test_allocate_refuses_a_slot_of_an_unhealthy_device(kubelet, kubelet_root, short_root):
    host = fakehost.build(short_root / "host", "default")
    host.set_port_state("erdma_1", False)
    async with manager(kubelet_root, erdma_plugin(short_root / "host")):
        assert (await listed(kubelet, 2 * SLOTS))["erdma_1/0"] == "Unhealthy"
        details = await refused(kubelet, [["erdma_1/0"]])
        assert "'erdma_1/0'" in details and "Unhealthy" in details


async def test_allocate_refuses_a_device_that_is_not_exposed(kubelet, kubelet_root, short_root):
    fakehost.build(short_root / "host", "default")
    exposure = select(parse_rules(["i-* erdma_1"]), "i-abc")
    async with manager(kubelet_root, erdma_plugin(short_root / "host", exposure=exposure)):
        await listed(kubelet, SLOTS)
        details = await refused(kubelet, [["erdma_0/0"]])
        assert "'erdma_0/0'" in details and "erdma_1/" in details


# -- GetPreferredAllocation -----------------------------------------------------------------


def ids(device: str, count: int = SLOTS) -> list[str]:
    return [f"{device}/{i}" for i in range(count)]


@pytest.mark.parametrize(
    ("available", "must", "size"),
    [
        (ids("erdma_0") + ids("erdma_1"), [], 3),
        (ids("erdma_0") + ids("erdma_0"), [], 4),  # kubelet never repeats; we must not either
        (ids("erdma_0")[:2] + ids("erdma_1"), ["erdma_1/2"], 3),
        ([*ids("erdma_0"), "erdma_9/0", "bogus"], [], 4),  # unknown IDs in available
        (["erdma_9/0", "erdma_1/1", "erdma_1/2"], [], 2),  # an unknown ID is never preferred
        (ids("erdma_1"), ["erdma_1/3", "erdma_1/3"], 2),
        (ids("erdma_0"), [], 4),
        (ids("erdma_0"), [], 0),
    ],
)
async def test_preferred_allocation_keeps_the_contract(
    kubelet, kubelet_root, short_root, available, must, size
):
    fakehost.build(short_root / "host", "default")
    async with manager(kubelet_root, erdma_plugin(short_root / "host")):
        advertised = set(await listed(kubelet, 2 * SLOTS))
        chosen = await kubelet.preferred(ERDMA_RESOURCE, available, must, size)
        assert len(chosen) == size
        assert len(set(chosen)) == len(chosen)
        assert set(chosen) <= set(available)
        assert set(must) <= set(chosen)
        if len(set(available) & advertised) >= size:
            assert set(chosen) <= advertised


@pytest.mark.parametrize(
    ("available", "must", "size", "named"),
    [
        (ids("erdma_0")[:2], [], 3, "3"),  # more than available
        (ids("erdma_0") + ids("erdma_0"), [], 5, "5"),  # repeats do not count twice
        (ids("erdma_0"), ["erdma_1/0"], 2, "'erdma_1/0'"),  # must-include not available
        (ids("erdma_0"), ["erdma_0/0", "erdma_0/1", "erdma_0/2"], 2, "2"),  # must > size
        (ids("erdma_0"), [], -1, "-1"),
    ],
)
async def test_impossible_preferred_requests_are_invalid_argument(
    kubelet, kubelet_root, short_root, available, must, size, named
):
    fakehost.build(short_root / "host", "default")
    async with manager(kubelet_root, erdma_plugin(short_root / "host")):
        await listed(kubelet, 2 * SLOTS)
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await kubelet.preferred(ERDMA_RESOURCE, available, must, size)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert named in (error.value.details() or "")


class CarelessPlugin(ResourcePlugin):
    """Answers GetPreferredAllocation with whatever a test sets, contract or not."""

    resource_name = "example.com/careless"
    socket_stem = "careless"
    preferred_allocation_available = True

    def __init__(self, answer: list[str]) -> None:
        self.answer = answer

    def devices(self) -> Sequence[PluginDevice]:
        return [PluginDevice(f"c{i}") for i in range(4)]

    def allocate(self, container_requests: Sequence[Sequence[str]]) -> list[ContainerAllocation]:
        return [ContainerAllocation() for _ in container_requests]

    def preferred_allocation(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        return list(self.answer)


@pytest.mark.parametrize(
    "answer",
    [
        ["c9", "c0"],  # an ID outside available and never advertised
        ["c3", "c0"],  # inside advertised, outside available
        ["c0", "c0"],  # a duplicate
        [],  # too few
        ["c0", "c1", "c2"],  # too many, and drops the must-include
        ["", "c1"],
    ],
)
async def test_a_careless_plugin_answer_is_held_to_the_contract(kubelet, kubelet_root, answer):
    plugin = CarelessPlugin(answer)
    async with PluginManager([plugin], kubelet_root=kubelet_root, registry=CollectorRegistry()):
        await kubelet.wait_for(
            lambda: len(kubelet.latest(plugin.resource_name) or {}) == 4, 5, "listed"
        )
        chosen = await kubelet.preferred(plugin.resource_name, ["c0", "c1", "c2"], ["c2"], 2)
        assert len(chosen) == 2 and len(set(chosen)) == 2
        assert "c2" in chosen and set(chosen) <= {"c0", "c1", "c2"}
