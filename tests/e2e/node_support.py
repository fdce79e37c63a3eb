"""A test's view of the node: agents on fixture hosts and pods on the real kubelet."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.e2e.agent_support import AGENT, Agent
from tests.e2e.kubelet_support import Api, KubeletNode, node_resource, wait_for
from tests.e2e.pods_support import NAMESPACE, PODS, Seen, run_pod

SERVED = ("aliyun/erdma", "rdma/hca")
RESOURCE = "/apis/resource.k8s.io/v1"
CLAIMS = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"


class Node:
    """What a test drives: agents on fixture hosts and pods on the real kubelet; cleans up."""

    def __init__(self, api: Api, kubelet: KubeletNode, root: Path) -> None:
        self.api = api
        self.kubelet = kubelet
        self.root = root
        self.agents: list[Agent] = []
        self.pods: list[str] = []

    def agent(
        self,
        variant: str = "default",
        values: Mapping[str, Any] | None = None,
        extra_args: tuple[str, ...] = (),
        start: bool = True,
        daemonset: str = AGENT,
    ) -> Agent:
        """A new agent on a new fixture host (whose device nodes the session made on the host)."""
        agent = Agent(
            self.kubelet,
            self.root / f"agent{len(self.agents)}",
            variant,
            values,
            extra_args,
            daemonset,
        )
        self.agents.append(agent)
        missing = [p for p in agent.device_numbers() if not Path(p).exists()]
        assert not missing, f"{missing} not on the host: add {variant!r} to VARIANTS_USED"
        if start:
            agent.start()
        return agent

    def wait_allocatable(self, resource: str, count: int) -> None:
        """Until the kubelet writes ``count`` as capacity and allocatable of ``resource``."""
        wait_for(
            lambda: node_resource(self.api, self.kubelet.node, resource) == (count, count),
            f"{resource} {count} in the Node's capacity and allocatable",
        )

    def dra_agent(
        self, values: Mapping[str, Any], driver: str, devices: int = 2
    ) -> tuple[Agent, dict[str, Any]]:
        """An agent on a default fixture host with the chart's DRA ``values``: its DeviceClasses
        applied, its driver registered with the kubelet, and its ResourceSlice (returned)
        published with ``devices`` devices (the first generation may be empty)."""
        agent = self.agent("default", {"dra": dict(values)})
        for device_class in agent.device_classes:
            if self.api.get(f"{RESOURCE}/deviceclasses/{device_class['metadata']['name']}") is None:
                self.api.apply_object(device_class)
        wait_for(lambda: "DRA driver registered with kubelet" in agent.log, "DRA registration")
        (published,) = wait_for(
            lambda: [
                s for s in self.slices(driver) if len(s["spec"].get("devices") or []) == devices
            ],
            f"our ResourceSlice with {devices} devices",
        )
        return agent, published

    def slices(self, driver: str) -> list[dict[str, Any]]:
        """This node's ResourceSlices of ``driver``, as the API server stores them."""
        items = self.api.get(f"{RESOURCE}/resourceslices")["items"]
        return [
            s
            for s in items
            if s["spec"].get("driver") == driver and s["spec"].get("nodeName") == self.kubelet.node
        ]

    def run(self, manifest: Mapping[str, Any]) -> tuple[dict[str, Any], Seen]:
        """Create a pod (deleted at the end of the test) and wait for its container's report."""
        self.pods.append(manifest["metadata"]["name"])
        return run_pod(self.api, self.kubelet, manifest)

    def create(self, manifest: Mapping[str, Any]) -> None:
        """Create a pod that is not expected to run (deleted at the end of the test)."""
        self.pods.append(manifest["metadata"]["name"])
        self.api.create(PODS, manifest)

    def close(self) -> None:
        """Pods first (their devices go back to the kubelet), their claims released, then the
        agents."""
        for name in self.pods:
            self.api.delete(f"{PODS}/{name}")
        self.release_claims()
        for agent in self.agents:
            agent.stop()
        # the kubelet keeps a stopped plugin's capacity (grace period) with allocatable 0; wait
        # for that, so the next test's "allocatable is full" means its own agent registered
        for resource in SERVED:
            if node_resource(self.api, self.kubelet.node, resource):
                wait_for(
                    functools.partial(_drained, self.api, self.kubelet.node, resource),
                    f"{resource} allocatable 0 after the agent stopped",
                )

    def release_claims(self) -> None:
        """Deallocate the claims on this node's pool once their pods are gone, as
        kube-controller-manager does (there is none here). Without it a claim keeps its
        device, and one a test deleted stays behind the scheduler's delete protection, so a
        later test's claim on that device never schedules."""
        for claim in (self.api.get(CLAIMS) or {}).get("items", []):
            allocation = claim.get("status", {}).get("allocation") or {}
            results = allocation.get("devices", {}).get("results", [])
            if not any(r.get("pool") == self.kubelet.node for r in results):
                continue
            path = f"{CLAIMS}/{claim['metadata']['name']}"
            cleared = {"status": {"allocation": None, "reservedFor": None}}
            self.api.merge_patch(f"{path}/status", cleared)
            self.api.merge_patch(path, {"metadata": {"finalizers": None}})


def _drained(api: Api, node: str, resource: str) -> bool:
    """No healthy devices of ``resource`` left in the Node's allocatable (or no resource)."""
    found = node_resource(api, node, resource)
    return found is None or found[1] == 0
