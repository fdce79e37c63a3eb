"""DRA on a real node: the agent's driver registers through the kubelet's plugins_registry and
publishes its ResourceSlice; the real kube-scheduler allocates a claim for the chart's
DeviceClass (a CEL selector on our attributes picks the device it names) and binds the pod;
the kubelet calls NodePrepareResources, containerd injects the CDI device, the container sees
it; deleting the pod unprepares the claim and the CDI spec goes.

Nothing here creates claims from templates or releases them (no controller-manager), so the
test creates the claim and, after the pod is gone, deletes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from erdma.host.devices import scan
from tests.e2e.kubelet_support import Scheduler, wait_for
from tests.e2e.node_support import RESOURCE, Node
from tests.e2e.pods_support import NAMESPACE, PODS, pod_manifest, unique

pytestmark = pytest.mark.root
DRIVER = "erdma.aliyun.com"
CLAIMS = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
WANTED = "erdma_1"


def _claim(name: str) -> dict[str, Any]:
    selector = f'device.attributes["{DRIVER}"].ibdev == "{WANTED}"'
    request = {
        "name": "rdma",
        "exactly": {
            "deviceClassName": DRIVER,
            "allocationMode": "ExactCount",
            "count": 1,
            "selectors": [{"cel": {"expression": selector}}],
        },
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [request]}},
    }


def _specs_naming(cdi_dir: Path, text: str) -> list[Path]:
    return [p for p in cdi_dir.iterdir() if p.is_file() and text in p.read_text()]


def test_scheduler_allocates_kubelet_prepares_container_sees_device(
    node: Node, scheduler: Scheduler
) -> None:
    agent = node.agent("default", {"dra": {"enabled": True}})
    for device_class in agent.device_classes:
        if node.api.get(f"{RESOURCE}/deviceclasses/{device_class['metadata']['name']}") is None:
            node.api.apply_object(device_class)
    registry = Path(node.kubelet.env["KUBELET_PLUGINS_REGISTRY_DIR"])
    wait_for(
        lambda: [p for p in registry.iterdir() if p.name.startswith(DRIVER)],
        "the DRA registration socket in the kubelet's plugins_registry",
    )
    # the kubelet's NotifyRegistrationStatus(registered=true) is what the agent logs here
    wait_for(lambda: "DRA driver registered with kubelet" in agent.log, "DRA registration")
    # the first generation may be empty (published before the first scan): wait for both
    published = wait_for(
        lambda: [s for s in node.slices(DRIVER) if len(s["spec"].get("devices") or []) == 2],
        "our ResourceSlice with both devices",
    )

    claim_name = unique("claim")
    claim = node.api.apply_object(_claim(claim_name))
    pod_name = unique("dra")
    try:
        pod, seen = node.run(pod_manifest(pod_name, None, claims=[("rdma", claim_name)]))
        assert pod["spec"]["nodeName"] == node.kubelet.node  # bound by the real scheduler
        allocated = node.api.get(f"{CLAIMS}/{claim_name}")["status"]
        (result,) = allocated["allocation"]["devices"]["results"]
        assert result["driver"] == DRIVER
        (chosen,) = [
            d for s in published for d in s["spec"]["devices"] if d["name"] == result["device"]
        ]
        assert chosen["attributes"]["ibdev"]["string"] == WANTED  # the CEL selector decided
        assert [r["name"] for r in allocated["reservedFor"]] == [pod_name]

        device = {d.name: d for d in scan(agent.host.root).erdma_devices}[WANTED]
        assert seen.devices.get(device.uverbs.path) == (device.uverbs.major, device.uverbs.minor)
        assert not [p for p in seen.devices if "uverbs" in p and p != device.uverbs.path]
        assert _specs_naming(node.kubelet.cdi_dir, claim["metadata"]["uid"])  # prepared

        node.api.delete(f"{PODS}/{pod_name}")
        wait_for(
            lambda: not _specs_naming(node.kubelet.cdi_dir, claim["metadata"]["uid"]),
            "NodeUnprepareResources removing the claim's CDI spec",
        )
    finally:
        node.api.delete(f"{PODS}/{pod_name}")
        node.api.delete(f"{CLAIMS}/{claim_name}")
