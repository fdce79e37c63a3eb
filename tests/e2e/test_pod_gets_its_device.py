"""A pod asking for `aliyun/erdma: 1` is admitted by the real kubelet and run by containerd,
and inside its container are exactly the device nodes and variables of the device it got:
through DeviceSpecs, or through containerd's CDI injection from the spec the agent writes."""

from __future__ import annotations

from typing import Any

import pytest

from erdma.host.devices import scan
from tests.e2e.node_support import Node
from tests.e2e.pods_support import pod_manifest, unique

pytestmark = pytest.mark.root
ERDMA = "aliyun/erdma"
RDMA_CM = ("/dev/infiniband/rdma_cm", (10, 58))

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "default-mode": ("default", {}),
    "ofed-mode-gpu": ("gpu", {}),
    "cdi": ("default", {"agent": {"deviceListStrategy": "cdi-cdi-devices"}}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_container_sees_exactly_its_device(node: Node, case: str) -> None:
    variant, values = CASES[case]
    agent = node.agent(variant, values)
    slots = int(agent.config["slotsPerDevice"])
    node.wait_allocatable(ERDMA, 2 * slots)

    _, seen = node.run(pod_manifest(unique("one"), node.kubelet.node, {ERDMA: "1"}))

    by_name = {d.name: d for d in scan(agent.host.root).erdma_devices}
    got = seen.env["ERDMA_DEVICES"]
    assert got in by_name, seen.env
    device = by_name[got]
    expected = {device.uverbs.path: (device.uverbs.major, device.uverbs.minor)}
    if variant == "default":
        expected[RDMA_CM[0]] = RDMA_CM[1]  # default mode: rdma_cm too
        assert seen.env["SMCR_PNET"] == device.pnetid
    else:  # the GPU node runs ofed: no rdma_cm, NCCL told which HCA to use
        assert seen.env["NCCL_IB_HCA"] == f"={device.name}"
        assert "NCCL_IB_GID_INDEX" in seen.env
    assert seen.devices == expected
    if case == "cdi":  # Allocate named CDI devices only: containerd read the agent's spec
        assert agent.config["deviceListStrategy"] == "cdi-cdi-devices"
        specs = [p.read_text() for p in node.kubelet.cdi_dir.iterdir() if p.is_file()]
        assert [t for t in specs if got in t and device.uverbs.path in t], specs
