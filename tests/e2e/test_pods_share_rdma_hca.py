"""`rdma/hca` served by the chart's shared DaemonSet (ack-rdma-dp-ds) on an mlx5 node: the real
kubelet shows 1k slots, and two pods each get every selected HCA at the same time."""

from __future__ import annotations

import pytest

from erdma.host.devices import scan
from tests.e2e.agent_support import SHARED
from tests.e2e.node_support import Node
from tests.e2e.pods_support import pod_manifest, unique

pytestmark = pytest.mark.root
HCA = "rdma/hca"


def test_two_pods_share_every_selected_hca(node: Node) -> None:
    agent = node.agent("mlx5", {"sharedRdma": {"enabled": True}}, daemonset=SHARED)
    capacity = int(agent.config["sharedResources"][0]["capacity"])
    node.wait_allocatable(HCA, capacity)

    hcas = [d for d in scan(agent.host.root).devices if d.driver == "mlx5_core"]
    assert hcas
    expected = {d.uverbs.path: (d.uverbs.major, d.uverbs.minor) for d in hcas}
    seen = [
        node.run(pod_manifest(unique(f"hca-{i}"), node.kubelet.node, {HCA: "1"}))[1]
        for i in range(2)
    ]
    for one in seen:
        got = {p: n for p, n in one.devices.items() if "uverbs" in p}
        assert got == expected
        assert "/dev/infiniband/rdma_cm" in one.devices
