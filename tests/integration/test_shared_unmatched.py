"""On a node where no HCA matches, the shared resource is not registered at all.

A registered `rdma/hca` with nothing behind it reads as capacity 1k, allocatable 0: the
scheduler and people both take it for a broken node. The resource appears as soon as an HCA
matching the selectors does (a late driver load, a hot-add).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from erdma.sim.fakehost_specs import mlx5_hca
from erdma.sim.node import SimulatedNode

SHARED = "rdma/hca"


async def test_nothing_registered_until_an_hca_matches(short_root: Path) -> None:
    node = SimulatedNode(short_root, "default", ["--resources", "shared"])  # eRDMA only
    try:
        await node.start()
        await asyncio.sleep(2)  # the agent has scanned several times by now
        assert not any(r.resource_name == SHARED for r in node.kubelet.registrations)
        netdev, hca = mlx5_hca(0, numa=0)
        node.host.add_device(netdev, hca)
        await node.wait_registered(SHARED)
        assert set((node.kubelet.latest(SHARED) or {}).values()) == {"Healthy"}
    finally:
        await node.stop()
