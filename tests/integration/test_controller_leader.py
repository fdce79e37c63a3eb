"""`erdma controller` leader election against the real API server: one Lease, one active replica.

The elector is exercised directly (acquire, renew, release, takeover after the leader stops
renewing), then two whole controllers share a Lease and the standby takes over when the leader
stops.
"""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
from lightkube import AsyncClient, KubeConfig

from erdma.controller.config import parse_config
from erdma.controller.main import run_controller
from erdma.kube.leader import LeaderElector
from tests.fakes.ecs.client import GENERAL_ERI, cloud_for
from tests.fakes.ports import free_port
from tests.integration.controller_support import FAST, add_node, eventually, ready_device

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]


async def test_leader_election_one_active_replica(kube_api):
    config = KubeConfig.from_file(kube_api.kubeconfig)
    a_client, b_client = AsyncClient(config), AsyncClient(config)
    lease = f"lease-{uuid.uuid4().hex[:6]}"
    a = LeaderElector(a_client, "kube-system", lease, "replica-a", duration=3)
    b = LeaderElector(b_client, "kube-system", lease, "replica-b", duration=3)
    try:
        assert await a.try_acquire()
        assert not await b.try_acquire()
        assert await a.try_acquire()  # renew
        await a.release()
        assert await b.try_acquire()  # immediate takeover after a clean release
        assert not await a.try_acquire()
    finally:
        await a_client.close()
        await b_client.close()


async def test_standby_takes_over_when_leader_stops_renewing(kube_api):
    config = KubeConfig.from_file(kube_api.kubeconfig)
    a_client, b_client = AsyncClient(config), AsyncClient(config)
    lease = f"lease-{uuid.uuid4().hex[:6]}"
    a = LeaderElector(a_client, "kube-system", lease, "replica-a", duration=2)
    b = LeaderElector(b_client, "kube-system", lease, "replica-b", duration=2)
    b_started = asyncio.Event()

    async def b_work() -> None:
        b_started.set()
        await asyncio.Event().wait()

    try:
        assert await a.try_acquire()  # a then "crashes": never renews, never releases
        standby = asyncio.create_task(b.run(b_work))
        await asyncio.sleep(1.0)
        assert not b_started.is_set()
        await asyncio.wait_for(b_started.wait(), timeout=60)
        standby.cancel()
        await asyncio.gather(standby, return_exceptions=True)
    finally:
        await a_client.close()
        await b_client.close()


async def health(port: int) -> dict:
    url = f"http://127.0.0.1:{port}/healthz"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200
        return await resp.json()


async def test_two_replicas_one_leader_and_failover(kube_api, emu, k8s):
    """Two replicas share a Lease: one acts; when it stops, the other takes over."""
    lease = {"leaseName": f"erdma-{uuid.uuid4().hex[:6]}", "leaseDurationSeconds": 3}
    config = parse_config({**FAST, **lease})
    ports = [free_port(), free_port()]
    replicas = [
        asyncio.create_task(
            run_controller(
                config,
                cloud_for(emu),
                kubeconfig=kube_api.kubeconfig,
                identity=f"replica-{i}",
                health_port=ports[i],
            )
        )
        for i in range(2)
    ]
    try:
        first = await add_node(k8s, emu.world.add_instance(GENERAL_ERI.name))
        await eventually(lambda: ready_device(k8s, first))
        states = [(await health(p))["leader"] for p in ports]
        assert sorted(states) == [False, True]
        leader = states.index(True)

        replicas[leader].cancel()
        await asyncio.wait({replicas[leader]}, timeout=60)
        second = await add_node(k8s, emu.world.add_instance(GENERAL_ERI.name))
        await eventually(lambda: ready_device(k8s, second))
        assert (await health(ports[1 - leader]))["leader"] is True
    finally:
        for task in replicas:
            task.cancel()
        await asyncio.wait(replicas, timeout=60)
