"""The real kubelet calls GetPreferredAllocation, and what the agent prefers is what the pod
gets: two slots packed onto one device (the emptiest, NUMA-aware), visible in the container."""

from __future__ import annotations

import pytest

from erdma.agent.allocation import Placement, preferred
from erdma.host.devices import scan
from tests.e2e.node_support import Node
from tests.e2e.pods_support import pod_manifest, unique

pytestmark = pytest.mark.root
ERDMA = "aliyun/erdma"


def _held(node: Node, uid: str) -> list[str]:
    """Device IDs the kubelet's checkpoint records for the pod with ``uid``."""
    entries = node.kubelet.checkpoint()["Data"]["PodDeviceEntries"]
    return sorted(
        i for e in entries if e["PodUID"] == uid for ids in e["DeviceIDs"].values() for i in ids
    )


def test_two_slots_are_packed_as_the_agent_prefers(node: Node) -> None:
    agent = node.agent("default")
    slots = int(agent.config["slotsPerDevice"])
    node.wait_allocatable(ERDMA, 2 * slots)
    name = node.kubelet.node

    first, seen_first = node.run(pod_manifest(unique("pref-a"), name, {ERDMA: "1"}))
    taken = _held(node, first["metadata"]["uid"])
    assert len(taken) == 1

    second, seen = node.run(pod_manifest(unique("pref-b"), name, {ERDMA: "2"}))
    got = _held(node, second["metadata"]["uid"])

    devices = {d.name: d for d in scan(agent.host.root).erdma_devices}
    everything = [f"{d}/{i}" for d in sorted(devices) for i in range(slots)]
    available = [s for s in everything if s not in taken]
    placement = Placement({n: d.numa_node for n, d in devices.items()}, {})
    # without a preference the kubelet takes any free IDs (an unsorted set); this is exactly
    # what the agent answers for what was free
    assert got == sorted(preferred(available, [], 2, placement))
    (device,) = {slot.split("/")[0] for slot in got}  # packed: both slots on one device
    assert device != seen_first.env["ERDMA_DEVICES"]  # the emptier device
    assert seen.env["ERDMA_DEVICES"] == device
    uverbs = devices[device].uverbs
    assert {p: n for p, n in seen.devices.items() if "uverbs" in p} == {
        uverbs.path: (uverbs.major, uverbs.minor)
    }
