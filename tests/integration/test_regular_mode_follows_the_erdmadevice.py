"""Regular mode keeps following the ERdmaDevice (real API server, agent process).

The agent used to stop watching at the first all-Ready object: a replaced ERI (new MAC) was
never exposed, and one Failed card kept the working ones hidden. Now each change re-computes
the exposure: the devices whose status is Ready, and only those.

The ERIs are marked primary so the agent leaves their netdevs to the OS: it must not touch the
test machine's links (netdev bring-up is covered in
tests/unit/test_regular_exposure_follows_states.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from erdma.kube import crd
from erdma.kube.client import KubeApi, new_client
from erdma.sim.fakehost_specs import ETH1, ETH2
from erdma.sim.node import SimulatedNode
from tests.fakes.kubeapi import KubeApiServer

pytest_plugins = ["tests.integration.conftest_kubeapi"]
ERDMA = "aliyun/erdma"
CARD0_MAC = ETH1.mac  # erdma_0's netdev
CARD1_MAC = ETH2.mac  # erdma_1's netdev


def _eri(eni: str, mac: str, card: int) -> crd.DeviceInfo:
    return crd.DeviceInfo(
        id=eni,
        mac=mac,
        instance_id="i-bp1follow",
        network_card_index=card,
        is_primary_eni=True,
        queue_pair=8,
    )


def _object(node: str, eris: list[crd.DeviceInfo]) -> dict[str, Any]:
    obj = crd.build(node, f"uid-{node}", "i-bp1follow", eris, jumbo_frame=False)
    del obj["metadata"]["ownerReferences"], obj["metadata"]["finalizers"]  # no Node object here
    return obj


def _regular(node: str, kube_api: KubeApiServer, root: Path) -> SimulatedNode:
    args = [
        "--no-local-eri-discovery",
        "--node-name",
        node,
        "--kubeconfig",
        str(kube_api.kubeconfig),
        "--slots-per-device",
        "2",
    ]
    return SimulatedNode(root, "default", args)


async def _exposed(node: SimulatedNode, ids: list[str], what: str) -> None:
    await node.kubelet.wait_for(
        lambda: sorted(node.kubelet.latest(ERDMA) or {}) == ids,
        15,
        f"{what}; kubelet has {sorted(node.kubelet.latest(ERDMA) or {})}; agent log:\n"
        f"{node.agent_log()}",
    )


async def test_replaced_eri_is_exposed(kube_api: KubeApiServer, short_root: Path) -> None:
    name = "follow-replace-1"
    node = _regular(name, kube_api, short_root)
    kube = KubeApi(new_client(kube_api.kubeconfig))
    try:
        await node.start()
        await node.wait_registered(ERDMA)
        await kube.create_device(_object(name, [_eri("eni-bp1old00001", CARD0_MAC, 0)]))
        ready = crd.status_body([crd.DeviceStatus("eni-bp1old00001", crd.READY)])
        await kube.patch_device_status(name, ready)
        await _exposed(node, ["erdma_0/0", "erdma_0/1"], "the first ERI exposed")

        # the controller replaces the lost ERI: a new ENI with another MAC, Pending then Ready
        spec = crd.spec_body([_eri("eni-bp1new00001", CARD1_MAC, 0)], jumbo_frame=False)
        await kube.patch_device(name, {"spec": spec})
        pending = crd.DeviceStatus("eni-bp1new00001", crd.PENDING, "attaching")
        await kube.patch_device_status(name, crd.status_body([pending]))
        await _exposed(node, [], "nothing Ready while the new ERI attaches")
        ready = crd.status_body([crd.DeviceStatus("eni-bp1new00001", crd.READY)])
        await kube.patch_device_status(name, ready)
        await _exposed(node, ["erdma_1/0", "erdma_1/1"], "the replacement ERI exposed")
    finally:
        await node.stop()
        await kube.delete_device(name)
        await kube.close()


async def test_failed_card_does_not_hide_the_ready_one(
    kube_api: KubeApiServer, short_root: Path
) -> None:
    name = "follow-failed-1"
    node = _regular(name, kube_api, short_root)
    kube = KubeApi(new_client(kube_api.kubeconfig))
    eris = [_eri("eni-bp1card0001", CARD0_MAC, 0), _eri("eni-bp1card1001", CARD1_MAC, 1)]
    try:
        await node.start()
        await node.wait_registered(ERDMA)
        await kube.create_device(_object(name, eris))
        failed = crd.DeviceStatus("eni-bp1card1001", crd.FAILED, "quota exceeded")
        statuses = [crd.DeviceStatus("eni-bp1card0001", crd.READY), failed]
        await kube.patch_device_status(name, crd.status_body(statuses))
        await _exposed(node, ["erdma_0/0", "erdma_0/1"], "card 0 exposed beside a Failed card 1")

        statuses = [crd.DeviceStatus(e.id, crd.READY) for e in eris]
        await kube.patch_device_status(name, crd.status_body(statuses))
        await _exposed(node, ["erdma_0/0", "erdma_0/1", "erdma_1/0", "erdma_1/1"], "both cards")
    finally:
        await node.stop()
        await kube.delete_device(name)
        await kube.close()
