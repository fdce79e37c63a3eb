"""Regular mode: the agent process waits for its node's ERdmaDevice (real API server) and then
exposes exactly the ERIs the controller recorded, without crash-looping while it waits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from erdma.kube import crd
from erdma.kube.client import KubeApi, new_client
from erdma.sim.node import SimulatedNode
from tests.fakes.kubeapi import KubeApiServer

pytest_plugins = ["tests.integration.conftest_kubeapi"]
ERDMA = "aliyun/erdma"
NODE = "regular-node-1"


def _device_object() -> dict[str, Any]:
    eri = crd.DeviceInfo(
        id="eni-bp1regular0001",
        mac="00:16:3e:2f:31:11",
        instance_id="i-bp1regular",
        network_card_index=0,
        is_primary_eni=True,
        queue_pair=8,
    )
    obj = crd.build(NODE, "uid-regular-node-1", "i-bp1regular", [eri], jumbo_frame=False)
    del obj["metadata"]["ownerReferences"], obj["metadata"]["finalizers"]  # no Node object here
    return obj


async def test_waits_for_ready_then_exposes_only_recorded_eris(
    kube_api: KubeApiServer, short_root: Path
) -> None:
    # Regular mode: override the Local mode flag SimulatedNode adds, point at the API server.
    regular = [
        "--no-local-eri-discovery",
        "--node-name",
        NODE,
        "--kubeconfig",
        str(kube_api.kubeconfig),
        "--slots-per-device",
        "2",
    ]
    node = SimulatedNode(short_root, "default", regular)
    kube = KubeApi(new_client(kube_api.kubeconfig))
    try:
        await node.start()
        await node.wait_registered(ERDMA)
        assert node.kubelet.latest(ERDMA) == {}  # nothing before the controller says Ready

        await kube.create_device(_device_object())
        pending = crd.status_body([crd.DeviceStatus("eni-bp1regular0001", "Pending", "attaching")])
        await kube.patch_device_status(NODE, pending)
        await node.kubelet.wait_for(
            lambda: "0/1 Ready; eni-bp1regular0001 Pending: attaching" in node.agent_log(),
            10,
            "progress logged",
        )
        assert node.kubelet.latest(ERDMA) == {}
        assert node.process is not None and node.process.returncode is None

        ready = crd.status_body([crd.DeviceStatus("eni-bp1regular0001", "Ready")])
        await kube.patch_device_status(NODE, ready)
        await node.kubelet.wait_for(
            lambda: sorted(node.kubelet.latest(ERDMA) or {}) == ["erdma_1/0", "erdma_1/1"],
            10,
            f"erdma_1 exposed; agent log:\n{node.agent_log()}",
        )
    finally:
        await node.stop()
        await kube.delete_device(NODE)
        await kube.close()
