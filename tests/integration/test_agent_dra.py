"""The agent with `dra.enabled`: one backend, two front ends. The DRA driver publishes the
devices it owns in the node's ResourceSlice (real API server) and the device plugin leaves
exactly those out of what kubelet sees, so no device is handed out twice."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from erdma.agent.config import ConfigError, build_config
from erdma.agent.service import Agent
from erdma.dra.names import DRIVER_NAME
from erdma.sim import fakehost
from erdma.sim.kubelet import FakeKubelet
from tests.fakes.kubeapi import KubeApiServer
from tests.integration.agent_support import agent_settings
from tests.integration.dra_support import slices_of

pytest_plugins = ["tests.integration.conftest_kubeapi"]
ERDMA = "aliyun/erdma"


async def slice_devices(k8s: AsyncClient, node: str) -> list[str]:
    found = await slices_of(k8s, node)
    return sorted(d["name"] for s in found for d in s["spec"].get("devices") or [])


def settings(kube_api: KubeApiServer, root: Path, node: str) -> dict[str, object]:
    return agent_settings(
        kube_api,
        root,
        node_name=node,
        prepare_node=False,
        slots_per_device=2,
        dra={"enabled": True, "devices": ["erdma_0"]},
    )


async def test_dra_owned_devices_are_published_and_not_advertised(kube_api, short_root):
    k8s = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    node = f"dra-node-{uuid.uuid4().hex[:6]}"
    await k8s.create(Node(metadata=ObjectMeta(name=node)))
    host = fakehost.build(short_root / "host", "default")
    kubelet = FakeKubelet(short_root / "kubelet" / "device-plugins")
    await kubelet.start()
    agent = Agent(build_config(environ={}, flags=settings(kube_api, short_root, node)))
    stop = asyncio.Event()
    running = asyncio.create_task(agent.run(stop))
    try:
        await kubelet.wait_for(lambda: bool(kubelet.latest(ERDMA)), 10, "devices listed")
        assert sorted(kubelet.latest(ERDMA) or {}) == ["erdma_1/0", "erdma_1/1"]
        for _ in range(100):
            names = await slice_devices(k8s, node)
            if names:
                break
            await asyncio.sleep(0.1)
        assert len(names) == 1 and "erdma-0" in names[0].replace("_", "-")
        registry = short_root / "kubelet" / "plugins_registry"
        assert [p for p in registry.iterdir() if p.name.startswith(f"{DRIVER_NAME}-")]

        host.set_port_state("erdma_0", False)  # withdrawn from the slice within a rescan or two
        for _ in range(100):
            if not await slice_devices(k8s, node):
                break
            await asyncio.sleep(0.1)
        assert await slice_devices(k8s, node) == []
        assert sorted(kubelet.latest(ERDMA) or {}) == ["erdma_1/0", "erdma_1/1"]
    finally:
        stop.set()
        await running
        await kubelet.stop()
    assert await slice_devices(k8s, node) == []  # erdma_0 is still down: nothing published
    assert len(await slices_of(k8s, node)) == 1  # kept on stop, for the next agent to take over
    assert not [p for p in registry.iterdir() if p.name.startswith(f"{DRIVER_NAME}-")]
    await k8s.delete(ResourceSlice, (await slices_of(k8s, node))[0]["metadata"]["name"])
    await k8s.delete(Node, node)
    await k8s.close()


def test_dra_without_a_node_name_is_refused_at_start(kube_api, short_root):
    fakehost.build(short_root / "host", "default")
    flags = settings(kube_api, short_root, "")
    with pytest.raises(ConfigError, match=r"dra.enabled needs the node name"):
        Agent(build_config(environ={}, flags=flags))


def test_a_bad_dra_value_names_the_key(short_root):
    with pytest.raises(ConfigError, match=r"dra.unhealthy='hide'"):
        build_config(environ={}, flags={"dra": {"enabled": True, "unhealthy": "hide"}})
