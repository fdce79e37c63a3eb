"""On a real node, the claim a running pod holds says which ERI it got.

The real kube-scheduler allocates the claim, the real kubelet has the agent prepare it and
starts the pod; the claim's `status.devices` then carries the agent's entry for the device:
`networkData` with the ERI's interface and MAC (the fixture's interfaces do not exist on this
machine, so the agent finds no addresses and leaves `ips` out) and `Ready`, written by the
driver's field manager beside the scheduler's allocation.

Nothing here creates claims from templates or releases them (no controller-manager), so the
test creates the claim and deletes it."""

from __future__ import annotations

from typing import Any

import pytest

from erdma.host.devices import scan
from tests.e2e.kubelet_support import Scheduler
from tests.e2e.node_support import RESOURCE, Node
from tests.e2e.pods_support import NAMESPACE, PODS, pod_manifest, unique

pytestmark = pytest.mark.root
DRIVER = "erdma.aliyun.com"
CLAIMS = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"


def _claim(name: str) -> dict[str, Any]:
    exactly = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "rdma", "exactly": exactly}]}},
    }


def test_the_claim_of_a_running_pod_names_its_eri(node: Node, scheduler: Scheduler) -> None:
    agent, _ = node.dra_agent({"enabled": True}, DRIVER)
    claim_name, pod_name = unique("claim"), unique("dra-eri")
    node.api.apply_object(_claim(claim_name))
    try:
        node.run(pod_manifest(pod_name, None, claims=[("rdma", claim_name)]))
        status = node.api.get(f"{CLAIMS}/{claim_name}")["status"]
        (result,) = status["allocation"]["devices"]["results"]
        (entry,) = [e for e in status["devices"] if e["driver"] == DRIVER]
        assert (entry["pool"], entry["device"]) == (node.kubelet.node, result["device"])
        ibdev = result["device"].replace("-", "_")
        device = {d.name: d for d in scan(agent.host.root).erdma_devices}[ibdev]
        assert entry["networkData"] == {
            "interfaceName": device.netdev,
            "hardwareAddress": device.mac,
        }
        (ready,) = entry["conditions"]
        assert (ready["type"], ready["status"]) == ("Ready", "True")
    finally:
        node.api.delete(f"{PODS}/{pod_name}")
        node.api.delete(f"{CLAIMS}/{claim_name}")
