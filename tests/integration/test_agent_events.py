"""Node Events from the agent, posted to the real API server: driver readiness (with the
remedy) and device health changes, so `kubectl describe node` tells people what is wrong."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Node

from erdma.agent.config import build_config
from erdma.agent.service import Agent
from erdma.host.run import Runner
from erdma.sim import fakehost
from erdma.sim.fakecmds import KmodCommands
from erdma.sim.kubelet import FakeKubelet
from tests.fakes.installer_node import InstallerNode, installer_tarball, mirror, sha256
from tests.fakes.kubeapi import KubeApiServer
from tests.integration.agent_support import agent_settings

pytest_plugins = ["tests.integration.conftest_kubeapi"]


@pytest.fixture
async def k8s(kube_api: KubeApiServer) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    yield client
    await client.close()


async def node_events(client: AsyncClient, node: str) -> list[tuple[str, str, str]]:
    found = client.list(Event, namespace="default", fields={"involvedObject.name": node})
    return [(e.type or "", e.reason or "", e.message or "") async for e in found]


async def wait_for_event(client: AsyncClient, node: str, reason: str) -> tuple[str, str, str]:
    for _ in range(150):
        for event in await node_events(client, node):
            if event[1] == reason:
                return event
        await asyncio.sleep(0.1)
    raise AssertionError(f"no {reason} Event on {node}: {await node_events(client, node)}")


async def run_agent(
    kube_api: KubeApiServer, root: Path, node: str, runner: Runner | None, **flags: object
) -> tuple[asyncio.Event, asyncio.Task[None], FakeKubelet]:
    kubelet = FakeKubelet(root / "kubelet" / "device-plugins")
    await kubelet.start()
    settings = agent_settings(kube_api, root, **{"node_name": node, **flags})
    config = build_config(environ={}, flags=settings)
    agent = Agent(config, runner=runner)
    stop = asyncio.Event()
    return stop, asyncio.create_task(agent.run(stop)), kubelet


async def test_missing_driver_and_its_installation_reach_the_node(kube_api, k8s, short_root):
    node = f"node-{uuid.uuid4().hex[:8]}"
    await k8s.create(Node(metadata=ObjectMeta(name=node)))
    host = fakehost.build(short_root / "host", "driver-not-loaded")
    marker, files = short_root / "installed", short_root / "mirror" / "erdma"
    files.mkdir(parents=True)
    runner = InstallerNode(
        kmod=KmodCommands(host, installed={"smc"}), marker=marker, workdir=short_root / "work"
    )
    with mirror(files.parent) as url:
        installer = {"enabled": True, "mirror": url}
        stop, task, kubelet = await run_agent(
            kube_api, short_root, node, runner, prepare_node=True, driver_installer=installer
        )
        try:
            kind, _, message = await wait_for_event(k8s, node, "ErdmaDriverNotReady")
            assert kind == "Warning" and "downloading the eRDMA installer failed" in message
            assert f"{url}/erdma_installer-1.5.9.tar.gz" in message  # 404: not published yet
            tarball = installer_tarball(short_root / "record", marker)
            (files / "erdma_installer-1.5.9.tar.gz").write_bytes(tarball)  # retried with backoff
            kind, _, message = await wait_for_event(k8s, node, "ErdmaDriverInstalled")
            assert kind == "Normal" and f"(sha256 {sha256(tarball)})" in message
            assert "; last output: building erdma for " in message  # the installer's own
            assert message.endswith("; erdma installed")
            kind, _, message = await wait_for_event(k8s, node, "ErdmaDriverReady")
            assert kind == "Normal" and "mode default" in message
        finally:
            stop.set()
            await task
            await kubelet.stop()
            await k8s.delete(Node, node)


async def test_device_health_changes_reach_the_node(kube_api, k8s, short_root):
    node = f"node-{uuid.uuid4().hex[:8]}"
    await k8s.create(Node(metadata=ObjectMeta(name=node)))
    host = fakehost.build(short_root / "host", "default")
    stop, task, kubelet = await run_agent(kube_api, short_root, node, None, prepare_node=False)
    try:
        await asyncio.sleep(0.3)
        host.set_port_state("erdma_1", False)
        kind, _, message = await wait_for_event(k8s, node, "ErdmaDeviceUnhealthy")
        assert kind == "Warning" and message.startswith("erdma_1: no ACTIVE port")
        host.set_port_state("erdma_1", True)
        kind, _, message = await wait_for_event(k8s, node, "ErdmaDeviceHealthy")
        assert kind == "Normal" and message.startswith("erdma_1:")
    finally:
        stop.set()
        await task
        await kubelet.stop()
        await k8s.delete(Node, node)


async def test_without_api_access_events_are_off_and_the_agent_serves(short_root, caplog):
    fakehost.build(short_root / "host", "default")
    kubelet = FakeKubelet(short_root / "kubelet" / "device-plugins")
    await kubelet.start()
    settings = {
        "host_root": short_root / "host",
        "kubelet_dir": short_root / "kubelet",
        "local_eri_discovery": True,
        "metrics_port": 0,
        "prepare_node": False,
    }
    config = build_config(environ={}, flags=settings)
    stop = asyncio.Event()
    caplog.set_level("INFO", logger="erdma.agent.events")
    task = asyncio.create_task(Agent(config).run(stop))
    try:
        await kubelet.wait_for(lambda: bool(kubelet.latest("aliyun/erdma")), 10)
        assert "node Events off" in caplog.text
    finally:
        stop.set()
        await task
        await kubelet.stop()
