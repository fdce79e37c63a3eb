"""The elector rides out API-server outages on real sockets: hold within renewDeadline, else yield.

The elector's client talks to the real kube-testserver through a loopback TCP proxy that the test
can cut: the listening port is closed (new connections are refused, as when the API server
restarts) and open connections are reset. Nothing is mocked; the errors are whatever httpx raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.resources.coordination_v1 import Lease

from erdma.controller.config import parse_config
from erdma.controller.main import run_controller
from erdma.kube.leader import LeaderElector
from tests.fakes.ecs.client import GENERAL_ERI, cloud_for
from tests.fakes.kubeapi import KubeApiServer
from tests.integration.controller_support import FAST, add_node, eventually, ready_device

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]

NAMESPACE = "kube-system"
DURATION = 5.0  # defaults derived from it: renewDeadline 3.33 s, retryPeriod 0.67 s
RENEW_DEADLINE = DURATION * 2 / 3


class CuttableProxy:
    """A TCP forwarder on loopback whose port can be made to refuse connections, and reopened.

    It runs its own event loop in a thread, like a piece of network outside the process: kopf,
    when the controller's operator is stopped, cancels every task of its loop created after it
    started, which would include the proxy's connection handlers.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    async def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def start(self) -> None:
        """Listen (again, on the same port after a cut)."""
        await self._call(self._start())

    async def cut(self) -> None:
        """Stop listening (connects now get ECONNREFUSED) and reset every open connection."""
        await self._call(self._cut())

    async def close(self) -> None:
        """Cut, wait for every connection handler to finish, and stop the thread."""
        await self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.to_thread(self._thread.join)
        self._loop.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._open):
            writer.transport.abort()

    async def _close(self) -> None:
        await self._cut()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        handler.add_done_callback(self._handlers.discard)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._open |= {writer, up_writer}
        pipes = [
            asyncio.create_task(self._pipe(reader, up_writer)),
            asyncio.create_task(self._pipe(up_reader, writer)),
        ]
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pipes:
                task.cancel()
            for w in (writer, up_writer):
                self._open.discard(w)
                w.transport.abort()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()


@pytest.fixture
async def proxy(kube_api: KubeApiServer) -> AsyncIterator[CuttableProxy]:
    proxy = CuttableProxy(kube_api.port)
    await proxy.start()
    yield proxy
    await proxy.close()


def proxied_kubeconfig(kube_api: KubeApiServer, proxy: CuttableProxy) -> dict[str, Any]:
    """The test server's kubeconfig, with the server address replaced by the proxy's."""
    conf: dict[str, Any] = yaml.safe_load(kube_api.kubeconfig.read_text())
    for cluster in conf["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    return conf


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


async def until(check: Callable[[], bool | Awaitable[bool]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if not isinstance(got, bool):
            got = await got
        if got:
            return
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


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
        cut = time.monotonic()
        await until(lambda: not elector.is_leader, timeout=RENEW_DEADLINE + 2)
        assert len(work.cancels) == 1, "work still running after leadership was lost"
        assert work.cancels[0] - cut <= RENEW_DEADLINE + 0.5
        await asyncio.sleep(DURATION - (time.monotonic() - cut))  # still out: keeps retrying
        assert not runner.done(), "an exception escaped the elector"
        await proxy.start()
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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
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
        await until(standing_by, timeout=RENEW_DEADLINE + 3)
        await asyncio.sleep(2)
        assert await standing_by()
        await proxy.start()
        await until(leading, timeout=10)
        second = await add_node(k8s, emu.world.add_instance(GENERAL_ERI.name))
        await eventually(lambda: ready_device(k8s, second))
        assert not replica.done()
    finally:
        replica.cancel()
        await asyncio.wait({replica}, timeout=15)
