"""`erdma sim --dra` plays the scheduler for its one-NIC claim; the real kube-scheduler's
structured allocator, given the same claim on a node publishing the same kind of slice, must
allocate the device the demo names (`first_admitted`): any NIC, and a NIC on one PCIe root."""

from __future__ import annotations

from typing import Any

import pytest

from erdma.tools.sim_dra import first_admitted, nic_request
from tests.e2e.kubelet_support import Scheduler, wait_for
from tests.e2e.node_support import RESOURCE, Node
from tests.e2e.pods_support import NAMESPACE, PODS, pod_manifest, unique

pytestmark = pytest.mark.root
DRIVER = "erdma.aliyun.com"
CLAIMS = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"


def allocated_device(node: Node, request: dict[str, Any]) -> str:
    """The device the real scheduler allocates a claim of ``request`` for a pod using it."""
    claim_name = unique("demo-claim")
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": claim_name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [request]}},
    }
    node.api.apply_object(claim)
    pod_name = unique("demo")
    try:
        node.create(pod_manifest(pod_name, None, claims=[("nic", claim_name)]))
        allocation = wait_for(
            lambda: (
                (node.api.get(f"{CLAIMS}/{claim_name}") or {}).get("status", {}).get("allocation")
            ),
            "the real scheduler's allocation of the demo's claim",
        )
        (result,) = allocation["devices"]["results"]
        return str(result["device"])
    finally:
        node.api.delete(f"{PODS}/{pod_name}")
        node.api.delete(f"{CLAIMS}/{claim_name}")


def test_the_demo_names_the_device_the_real_scheduler_allocates(
    node: Node, scheduler: Scheduler
) -> None:
    _, published = node.dra_agent({"enabled": True}, DRIVER)
    devices = published["spec"]["devices"]
    last_root = devices[-1]["attributes"][PCIE_ROOT]["string"]
    for root in (None, last_root):
        demo = first_admitted(devices, root)
        assert demo is not None
        assert allocated_device(node, nic_request(root)) == demo, f"pcieRoot {root}"
