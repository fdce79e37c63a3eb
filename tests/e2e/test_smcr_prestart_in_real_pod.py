"""SMC-R through PreStartContainer on a real node (smcr.mode=prestart).

The real kubelet calls PreStartContainer; the agent finds the pod through the kubelet's real
pod-resources API and its sandbox through containerd's real CRI, and enters the pod's real
network namespace (made by the tool's CNI). Nothing is faked in this path; what this kernel
lacks is SMC itself (no `net.smc` sysctls, no SMC netlink family), and the in-process stand-in
kernel of the integration tests cannot reach the agent process. So the annotated pod gets
exactly as far as this kernel allows: the agent's specific "SMC is not loaded" refusal, which
the kubelet reports as the container's start error. A pod without the annotation starts,
untouched.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from erdma.api.names import SMCR_ANNOTATION
from tests.e2e.kubelet_support import wait_for
from tests.e2e.node_support import Node
from tests.e2e.pods_support import container_waiting, pod_manifest, unique

pytestmark = pytest.mark.root
ERDMA = "aliyun/erdma"


def _see_host_netns(host_root: Path) -> None:
    """The agent prefixes the sandbox's netns path with its host root (e.g. /proc/1/root in a
    container); a fixture root has no /run, so point it at this machine's."""
    for sub in ("run/netns", "var/run/netns"):
        link = host_root / sub
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists() and not link.is_symlink():
            link.symlink_to(Path("/") / sub)


def test_prestart_reaches_the_annotated_pods_netns_and_leaves_others_alone(node: Node) -> None:
    agent = node.agent("default", {"smcr": {"mode": "prestart"}}, start=False)
    assert agent.config["prestartContainer"] is True
    _see_host_netns(agent.host.root)
    agent.start()
    slots = int(agent.config["slotsPerDevice"])
    node.wait_allocatable(ERDMA, 2 * slots)
    name = node.kubelet.node

    plain, _ = node.run(pod_manifest(unique("plain"), name, {ERDMA: "1"}, host_network=False))
    plain_name = plain["metadata"]["name"]
    wait_for(
        lambda: f"pod default/{plain_name}: SMC-R not requested" in agent.log,
        "the agent's verdict on the plain pod",
    )

    smcr = unique("smcr")
    node.create(
        pod_manifest(
            smcr, name, {ERDMA: "1"}, host_network=False, annotations={SMCR_ANNOTATION: "true"}
        )
    )
    waiting = wait_for(lambda: container_waiting(node.api, smcr), "the SMC-R pod's start error")
    assert "PreStartContainer" in waiting["message"] or "SMC" in waiting["message"], waiting
    assert "SMC is not loaded on this node" in waiting["message"], waiting
    assert "/proc/sys/net/smc" in waiting["message"]
