"""DRA device health in the pod's status, on a real node: a running pod holds a claim on
erdma_0; the port goes DOWN on the fixture host and the kubelet (gate `ResourceHealthStatus`)
shows the device Unhealthy in `status.containerStatuses[].allocatedResourcesStatus`, while the
ResourceSlice taints it `LinkDown`; the port comes back ACTIVE and both clear.

The agent's driver streams DRAResourceHealth on its DRA socket; the kubelet calls it on its own
once the driver is registered. The kubelet fills `allocatedResourcesStatus` only for claims it
finds in `pod.status.resourceClaimStatuses`, which kube-controller-manager writes for claims made
from a ResourceClaimTemplate; there is no controller-manager here, so the test does what it
does: creates the pod's claim from the template, owned by the pod, and records it in the pod's
status. The real scheduler allocates it and binds the pod. How long each change took to reach
the pod's status is recorded beside the other e2e measurements, never asserted.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.kubelet_support import Api, Scheduler, record, wait_for
from tests.e2e.node_support import CLAIMS, RESOURCE, Node
from tests.e2e.pods_support import NAMESPACE, PODS, phase, pod_manifest, unique

pytestmark = pytest.mark.root
DRIVER = "erdma.aliyun.com"
WANTED = "erdma_0"
TEMPLATES = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaimtemplates"
POD_CLAIM = "rdma"


def _template(name: str) -> dict[str, Any]:
    selector = f'device.attributes["{DRIVER}"].ibdev == "{WANTED}"'
    request = {
        "name": "nic",
        "exactly": {
            "deviceClassName": DRIVER,
            "allocationMode": "ExactCount",
            "count": 1,
            "selectors": [{"cel": {"expression": selector}}],
        },
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def _claim_for(pod: dict[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    """The claim kube-controller-manager's resourceclaim controller makes for the pod."""
    meta = pod["metadata"]
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"{meta['name']}-{POD_CLAIM}",
            "namespace": NAMESPACE,
            "ownerReferences": [owner],
            "annotations": {"resource.kubernetes.io/pod-claim-name": POD_CLAIM},
        },
        "spec": template["spec"]["spec"],
    }


def resource_health(api: Api, pod: str) -> dict[str, dict[str, Any]]:
    """{resourceID: ResourceHealth} of the pod's claim, as the kubelet wrote it."""
    obj = api.get(f"{PODS}/{pod}") or {}
    for status in obj.get("status", {}).get("containerStatuses", []):
        for resource in status.get("allocatedResourcesStatus") or []:
            if resource["name"] == f"claim:{POD_CLAIM}":
                return {r["resourceID"]: r for r in resource.get("resources") or []}
    return {}


def _health_is(api: Api, pod: str, wanted: str) -> dict[str, dict[str, Any]] | None:
    found = resource_health(api, pod)
    return found if found and {r.get("health") for r in found.values()} == {wanted} else None


def _taints(node: Node, device: str) -> list[dict[str, Any]] | None:
    for slice_ in node.slices(DRIVER):
        for entry in slice_["spec"].get("devices") or []:
            if entry["name"] == device:
                return list(entry.get("taints") or [])
    return None


def test_port_down_shows_unhealthy_in_the_pod_status_and_active_healthy(
    node: Node, scheduler: Scheduler
) -> None:
    agent, _ = node.dra_agent({"enabled": True, "unhealthy": "taint"}, DRIVER)
    template = node.api.create(TEMPLATES, _template(unique("nic")))
    pod_name = unique("health")
    claims = [(POD_CLAIM, template["metadata"]["name"])]
    node.create(pod_manifest(pod_name, None, claims=claims, from_template=True))
    claim = node.api.create(CLAIMS, _claim_for(node.api.get(f"{PODS}/{pod_name}"), template))
    claim_name = claim["metadata"]["name"]
    try:
        node.api.merge_patch(
            f"{PODS}/{pod_name}/status",
            {
                "status": {
                    "resourceClaimStatuses": [{"name": POD_CLAIM, "resourceClaimName": claim_name}]
                }
            },
        )
        wait_for(lambda: phase(node.api, pod_name) == "Running", f"pod {pod_name} Running")
        allocated = node.api.get(f"{CLAIMS}/{claim_name}")["status"]["allocation"]
        (result,) = allocated["devices"]["results"]
        assert (result["driver"], result["pool"]) == (DRIVER, node.kubelet.node)
        device = result["device"]
        assert device == WANTED.replace("_", "-")

        healthy = wait_for(
            lambda: _health_is(node.api, pod_name, "Healthy"),
            "the claim's device Healthy in the pod's allocatedResourcesStatus",
        )
        (resource_id,) = healthy  # the CDI device the kubelet handed to the container
        assert claim["metadata"]["uid"] in resource_id and resource_id.endswith(device)

        started = time.monotonic()
        agent.host.set_port_state(WANTED, active=False)
        down = wait_for(
            lambda: _health_is(node.api, pod_name, "Unhealthy"),
            "the device Unhealthy in the pod's status after its port went DOWN",
        )
        record(
            f"DRA health: port DOWN to Unhealthy in pod status {time.monotonic() - started:.3f}s"
        )
        assert list(down) == [resource_id]
        assert "DOWN" in down[resource_id]["message"]  # the agent's words reach the pod
        assert wait_for(lambda: _taints(node, device), "the LinkDown taint in the slice") == [
            {"key": f"{DRIVER}/unhealthy", "value": "LinkDown", "effect": "NoSchedule"}
        ]

        started = time.monotonic()
        agent.host.set_port_state(WANTED, active=True)
        wait_for(
            lambda: _health_is(node.api, pod_name, "Healthy"),
            "the device Healthy again in the pod's status after its port came back ACTIVE",
        )
        record(
            f"DRA health: port ACTIVE to Healthy in pod status {time.monotonic() - started:.3f}s"
        )
        wait_for(lambda: _taints(node, device) == [], "the taint gone from the slice")
    finally:
        node.api.delete(f"{PODS}/{pod_name}")
        node.api.delete(f"{CLAIMS}/{claim_name}")  # gone once `node` releases it
        node.api.delete(f"{TEMPLATES}/{template['metadata']['name']}")
