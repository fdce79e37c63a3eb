"""The agent makes one Kubernetes client and shares it: its DRA driver publishes the slice and
its node Events reach the Node through the same client (each used to make its own, three per
process with Regular mode), and the agent closes it when it stops."""

from __future__ import annotations

import asyncio
import uuid

from lightkube import AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Node
from lightkube.resources.resource_v1 import ResourceSlice

import erdma.kube.client
from erdma.agent.config import build_config
from erdma.agent.service import Agent
from erdma.sim import fakehost
from erdma.sim.kubelet import FakeKubelet
from tests.integration.dra_support import slices_of
from tests.waiting import until

pytest_plugins = ["tests.integration.conftest_kubeapi"]


async def test_dra_and_events_share_one_client(kube_api, short_root, monkeypatch):
    made: list[AsyncClient] = []
    real = erdma.kube.client.new_client

    def counted(kubeconfig: str | None = None) -> AsyncClient:
        made.append(real(kubeconfig))
        return made[-1]

    monkeypatch.setattr(erdma.kube.client, "new_client", counted)
    k8s = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    node = f"one-client-{uuid.uuid4().hex[:6]}"
    await k8s.create(Node(metadata=ObjectMeta(name=node)))
    host = fakehost.build(short_root / "host", "default")
    kubelet = FakeKubelet(short_root / "kubelet" / "device-plugins")
    await kubelet.start()
    flags = {
        "host_root": host.root,
        "kubelet_dir": short_root / "kubelet",
        "node_name": node,
        "kubeconfig": str(kube_api.kubeconfig),
        "local_eri_discovery": True,
        "metrics_port": 0,
        "rescan_interval": 0.1,
        "prepare_node": False,
        "dra": {"enabled": True, "devices": ["erdma_0"]},
    }
    agent = Agent(build_config(environ={}, flags=flags))
    stop = asyncio.Event()
    running = asyncio.create_task(agent.run(stop))

    async def published() -> bool:
        return any(s["spec"].get("devices") for s in await slices_of(k8s, node))

    async def posted() -> bool:
        found = k8s.list(Event, namespace="default", fields={"involvedObject.name": node})
        return any([e.reason == "ErdmaDriverReady" async for e in found])

    try:
        await until(published, what="the DRA driver's slice")
        agent.events.emit("Normal", "ErdmaDriverReady", "erdma loaded (from the test)")
        await until(posted, what="the agent's Event on the Node")
        assert len(made) == 1
    finally:
        stop.set()
        await running
        await kubelet.stop()
        for found in await slices_of(k8s, node):
            await k8s.delete(ResourceSlice, found["metadata"]["name"])
        await k8s.delete(Node, node)
        await k8s.close()
    assert made[0]._client._client.is_closed  # (lightkube's httpx client) closed at the stop
