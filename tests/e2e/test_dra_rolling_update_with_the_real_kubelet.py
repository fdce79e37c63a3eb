"""A rolling update of the agent on a real node: the kubelet never loses the DRA driver.

As a DaemonSet update with maxSurge does, a second agent starts while the first still runs a
pod's claim; both register with the real kubelet (sockets of their own each, which kubelet
1.33+ keeps side by side), then the first stops. Deleting the pod afterwards has the kubelet
unprepare its claim through the second agent, which knows it from the shared checkpoint, and a
new pod's claim is prepared by the second agent; the node's ResourceSlice stays the same
object, taken over unchanged by the second agent.

Nothing here creates claims from templates or releases them (no controller-manager), so the
test creates the claims and deletes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.agent_support import Agent
from tests.e2e.kubelet_support import Scheduler, wait_for
from tests.e2e.node_support import RESOURCE, Node
from tests.e2e.pods_support import NAMESPACE, PODS, pod_manifest, unique

pytestmark = pytest.mark.root
DRIVER = "erdma.aliyun.com"
CLAIMS = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
VALUES = {"dra": {"enabled": True}}


def _claim(name: str) -> dict[str, Any]:
    exactly = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}
    request = {"name": "rdma", "exactly": exactly}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [request]}},
    }


def _prepared(cdi_dir: Path, uid: str) -> bool:
    return any(p.is_file() and uid in p.read_text() for p in cdi_dir.iterdir())


def _registered(agent: Agent) -> bool:
    return "DRA driver registered with kubelet" in agent.log


def _run_with_claim(node: Node, claim_name: str) -> str:
    """A pod using a new claim, bound by the real scheduler, run to its report; the claim uid."""
    claim = node.api.apply_object(_claim(claim_name))
    pod = unique("dra-roll")
    node.run(pod_manifest(pod, None, claims=[("rdma", claim_name)]))
    return str(claim["metadata"]["uid"])


def test_the_kubelet_keeps_the_driver_while_a_new_agent_replaces_the_old(
    node: Node, scheduler: Scheduler
) -> None:
    old = node.agent("default", VALUES)
    for device_class in old.device_classes:
        if node.api.get(f"{RESOURCE}/deviceclasses/{device_class['metadata']['name']}") is None:
            node.api.apply_object(device_class)
    wait_for(lambda: _registered(old), "the old agent's DRA registration")
    (before,) = wait_for(
        lambda: [s for s in node.slices(DRIVER) if len(s["spec"].get("devices") or []) == 2],
        "the slice with both devices",
    )
    names = [unique("kept"), unique("new")]
    try:
        kept = _run_with_claim(node, names[0])
        assert _prepared(node.kubelet.cdi_dir, kept)  # by the old agent

        new = node.agent("default", VALUES)  # same devices, as the same node's next pod
        wait_for(lambda: _registered(new), "the new agent's DRA registration beside the old")
        old.stop()
        assert "ResourceSlice taken over unchanged" in new.log, new.log

        node.api.delete(f"{PODS}/{node.pods.pop(0)}")
        wait_for(
            lambda: not _prepared(node.kubelet.cdi_dir, kept),
            "the kubelet unpreparing the old agent's claim through the new agent",
        )
        fresh = _run_with_claim(node, names[1])
        assert _prepared(node.kubelet.cdi_dir, fresh)  # by the new agent, the old one is gone

        (after,) = node.slices(DRIVER)
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert after["spec"]["pool"] == before["spec"]["pool"]
    finally:
        for pod in node.pods:
            node.api.delete(f"{PODS}/{pod}")
        node.pods.clear()
        for name in names:
            node.api.delete(f"{CLAIMS}/{name}")
