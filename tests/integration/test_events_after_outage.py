"""Node Events resume when the API server comes back (they used to stop for good after one
outage: only API errors were caught, so a refused connection ended the posting task)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path

import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Node

from erdma.agent.events import NodeEvents
from erdma.aio import SupervisedTask, Supervisor
from tests.fakes.kubeapi import KubeApiServer
from tests.integration.proxy_support import CuttableProxy, proxied_kubeconfig

pytest_plugins = ["tests.integration.conftest_kubeapi"]


async def reasons(k8s: AsyncClient, node: str) -> list[str]:
    found = k8s.list(Event, namespace="default", fields={"involvedObject.name": node})
    return sorted([e.reason or "" async for e in found])


async def wait_for_reasons(k8s: AsyncClient, node: str, wanted: list[str]) -> None:
    for _ in range(100):
        if await reasons(k8s, node) == wanted:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"Events on {node}: {await reasons(k8s, node)}, wanted {wanted}")


async def test_node_events_resume_after_the_api_server_was_away(
    kube_api: KubeApiServer, tmp_path: Path, caplog
):
    k8s = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    node = f"events-{uuid.uuid4().hex[:6]}"
    await k8s.create(Node(metadata=ObjectMeta(name=node)))
    proxy = CuttableProxy(kube_api.port)
    await proxy.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(proxied_kubeconfig(kube_api, proxy)))
    events = NodeEvents(node, str(kubeconfig))
    supervisor = Supervisor([SupervisedTask("node events", events.post_forever)])
    caplog.set_level(logging.INFO, logger="erdma.kube.events")
    try:
        async with supervisor:
            events.emit("Normal", "BeforeOutage", "first")
            await wait_for_reasons(k8s, node, ["BeforeOutage"])
            await proxy.cut()
            events.emit("Warning", "DuringOutage", "lost: the API server is away")
            await asyncio.sleep(0.5)
            await proxy.start()
            events.emit("Normal", "AfterOutage", "the API server is back")
            await wait_for_reasons(k8s, node, ["AfterOutage", "BeforeOutage"])
        assert supervisor.restarts == {"node events": 0}  # survived, not restarted
        assert "cannot record an Event on node" in caplog.text
        assert "recording Events again" in caplog.text
    finally:
        await proxy.close()
        await k8s.delete(Node, node)
        await k8s.close()
