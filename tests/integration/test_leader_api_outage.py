"""The elector rides out API-server outages on real sockets: hold within renewDeadline, else yield.

The elector's client talks to the real kube-testserver through a loopback TCP proxy that the test
can cut: the listening port is closed (new connections are refused, as when the API server
restarts) and open connections are reset. Nothing is mocked; the errors are whatever httpx raises.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.resources.coordination_v1 import Lease

from erdma.controller.config import parse_config
from erdma.controller.main import run_controller
from erdma.kube.leader import LeaderElector, LeadershipLost
from tests.fakes.ecs.client import GENERAL_ERI, cloud_for
from tests.fakes.kubeapi import KubeApiServer
from tests.fakes.ports import free_port
from tests.integration.controller_support import FAST, add_node, eventually, ready_device
from tests.integration.proxy_support import CuttableProxy, proxied_kubeconfig
from tests.waiting import until

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]

NAMESPACE = "kube-system"
DURATION = 5.0  # defaults derived from it: renewDeadline 3.33 s, retryPeriod 0.67 s
RENEW_DEADLINE = DURATION * 2 / 3


@pytest.fixture
async def proxy(kube_api: KubeApiServer) -> AsyncIterator[CuttableProxy]:
    proxy = CuttableProxy(kube_api.port)
    await proxy.start()
    yield proxy
    await proxy.close()


@pytest.fixture
async def proxied(kube_api: KubeApiServer, proxy: CuttableProxy) -> AsyncIterator[AsyncClient]:
    """A client that reaches the API server only through ``proxy``."""
    client = AsyncClient(KubeConfig.from_dict(proxied_kubeconfig(kube_api, proxy)))
    yield client
    await client.close()


@pytest.fixture
async def direct(kube_api: KubeApiServer) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    yield client
    await client.close()


class Work:
    """A ``work`` factory for ``LeaderElector.run`` that records each start and cancellation."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.cancels: list[float] = []
        self.running = asyncio.Event()

    async def __call__(self) -> None:
        self.starts.append(time.monotonic())
        self.running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancels.append(time.monotonic())
            self.running.clear()
            raise


async def watch(elector: LeaderElector, seconds: float) -> list[bool]:
    """Sample ``is_leader`` every 50 ms for ``seconds``."""
    samples = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        samples.append(elector.is_leader)
        await asyncio.sleep(0.05)
    return samples


async def until_stopped(elector: LeaderElector, work: Work, timeout: float) -> None:
    """Wait for the elector to say it no longer leads, checking at every event-loop step (as a
    /healthz reader may) that it never says so while the work still runs."""
    deadline = time.monotonic() + timeout
    while elector.is_leader:
        assert time.monotonic() < deadline, "leadership not given up in time"
        await asyncio.sleep(0)
    assert not work.running.is_set(), "is_leader is False while the work still runs"


def failure_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "erdma.kube.leader" and r.levelno == logging.WARNING and "failed" in r.message
    ]


async def stop(task: asyncio.Task[None]) -> None:
    """Cancel ``run`` as a shutdown would; anything but CancelledError means it had crashed."""
    assert not task.done(), task.exception() if not task.cancelled() else "cancelled"
    task.cancel()
    (result,) = await asyncio.gather(task, return_exceptions=True)
    assert isinstance(result, asyncio.CancelledError), result


async def test_outage_shorter_than_renew_deadline_keeps_leadership(proxy, proxied, caplog):
    caplog.set_level(logging.INFO, logger="erdma.kube.leader")
    elector = LeaderElector(proxied, NAMESPACE, f"blip-{uuid.uuid4().hex[:6]}", "a", DURATION)
    work = Work()
    runner = asyncio.create_task(elector.run(work))
    try:
        await asyncio.wait_for(work.running.wait(), timeout=5)
        await proxy.cut()
        samples = await watch(elector, 1.0)
        await proxy.start()
        samples += await watch(elector, RENEW_DEADLINE)  # past the deadline: renewed since
        assert not runner.done(), "an exception escaped the elector"
        assert all(samples), "leadership dropped during an outage shorter than renewDeadline"
        assert len(work.starts) == 1 and not work.cancels
        assert failure_logs(caplog), "the failed renewals were not logged"
        await stop(runner)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


async def test_outage_longer_than_renew_deadline_yields_then_reacquires(proxy, proxied, caplog):
    caplog.set_level(logging.INFO, logger="erdma.kube.leader")
    name = f"blip-{uuid.uuid4().hex[:6]}"
    elector = LeaderElector(proxied, NAMESPACE, name, "a", DURATION)
    work = Work()
    runner = asyncio.create_task(elector.run(work))
    try:
        await asyncio.wait_for(work.running.wait(), timeout=5)
        await proxy.cut()
        await until_stopped(elector, work, timeout=60)
        assert len(work.cancels) == 1 and not elector.is_leader
        assert not runner.done(), "an exception escaped the elector"
        await proxy.start()  # it kept trying through the outage: it leads again
        await asyncio.wait_for(work.running.wait(), timeout=5)
        assert elector.is_leader and len(work.starts) == 2
        logs = failure_logs(caplog)
        assert logs and len(logs) == len(set(logs)) <= 3, logs  # once per distinct error
        await stop(runner)
        lease = await proxied.get(Lease, name, namespace=NAMESPACE)
        assert lease.spec is not None and not lease.spec.holderIdentity  # released on shutdown
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


async def test_cut_off_leader_stops_before_standby_takes_over(proxy, proxied, direct):
    """A leader cut off from the API stops working before the standby starts, then stands by."""
    name = f"blip-{uuid.uuid4().hex[:6]}"
    a = LeaderElector(proxied, NAMESPACE, name, "a", DURATION)
    b = LeaderElector(direct, NAMESPACE, name, "b", DURATION)
    a_work, b_work = Work(), Work()
    a_run = asyncio.create_task(a.run(a_work))
    await asyncio.wait_for(a_work.running.wait(), timeout=5)
    b_run = asyncio.create_task(b.run(b_work))
    try:
        await asyncio.sleep(1)
        assert not b_work.starts
        await proxy.cut()
        await asyncio.wait_for(b_work.running.wait(), timeout=DURATION + 3)
        assert a_work.cancels and a_work.cancels[0] < b_work.starts[0], "two leaders at once"
        await proxy.start()
        samples = await watch(a, 2.0)
        assert not any(samples) and len(a_work.starts) == 1  # a sees b's lease and stands by
        assert b.is_leader and not a_run.done()
        await stop(a_run)
        await stop(b_run)
    finally:
        for task in (a_run, b_run):
            task.cancel()
        await asyncio.gather(a_run, b_run, return_exceptions=True)


async def test_controller_survives_outage_and_leads_again(kube_api, proxy, emu, k8s, tmp_path):
    """The whole controller, all its traffic through the proxy: an outage past renewDeadline
    stops the operator but not the process; once the API is back it leads and reconciles again.
    """
    kubeconfig = Path(tmp_path) / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(proxied_kubeconfig(kube_api, proxy)))
    lease = {"leaseName": f"erdma-{uuid.uuid4().hex[:6]}", "leaseDurationSeconds": DURATION}
    port = free_port()
    replica = asyncio.create_task(
        run_controller(
            parse_config({**FAST, **lease}),
            cloud_for(emu),
            kubeconfig=kubeconfig,
            identity="replica-0",
            health_port=port,
        )
    )

    async def leading() -> bool:
        assert not replica.done(), "the controller exited"
        url = f"http://127.0.0.1:{port}/healthz"
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            assert resp.status == 200  # alive and healthy, leader or not
            return bool((await resp.json())["leader"])

    async def standing_by() -> bool:
        return not await leading()

    try:
        first = await add_node(k8s, emu.world.add_instance(GENERAL_ERI.name))
        await eventually(lambda: ready_device(k8s, first))
        await proxy.cut()
        await until(standing_by, timeout=60, what="the old leader stands by")
        await asyncio.sleep(2)
        assert await standing_by()
        await proxy.start()
        await until(leading, timeout=60, what="it leads again")
        second = await add_node(k8s, emu.world.add_instance(GENERAL_ERI.name))
        await eventually(lambda: ready_device(k8s, second))
        assert not replica.done()
    finally:
        replica.cancel()
        await asyncio.wait({replica}, timeout=15)


async def test_work_that_will_not_stop_ends_the_elector_before_a_standby_could_lead(proxy, proxied):
    """Leadership lost, and the work ignores its cancellation: the elector waits at most
    lease duration - renew deadline (when a standby may take over), then raises
    LeadershipLost, which makes the controller exit; it never keeps waiting beside a new leader."""
    elector = LeaderElector(proxied, NAMESPACE, f"blip-{uuid.uuid4().hex[:6]}", "a", DURATION)
    started, release = asyncio.Event(), asyncio.Event()

    async def stubborn() -> None:
        started.set()
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # a shutdown that hangs: the cancellation is swallowed

    runner = asyncio.create_task(elector.run(stubborn))
    try:
        await asyncio.wait_for(started.wait(), timeout=60)
        await proxy.cut()
        (outcome,) = await asyncio.gather(
            asyncio.wait_for(runner, timeout=120), return_exceptions=True
        )
        assert isinstance(outcome, LeadershipLost), outcome
        assert "did not stop within 1.67s" in str(outcome)
    finally:
        release.set()
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
