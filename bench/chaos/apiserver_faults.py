"""API-server outages under the real `erdma controller` process, leader election on.

The controller runs as its own process (as in the cluster: leader election on, both admission
webhooks served) and reaches the real kube-testserver only through a TCP proxy the scenario cuts:
connections are refused and reset for the whole outage. Meanwhile both webhooks are asked for a
review every half second. Held means the process never exited, every review was answered, and
after the API server is back the controller leads again and brings a new Node to Ready.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from lightkube import AsyncClient, KubeConfig
from prometheus_client.parser import text_string_to_metric_families

from bench.chaos.framework import Trials, scenario, stopwatch
from tests.fakes.ecs import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET, EcsEmulator
from tests.fakes.ecs.client import GENERAL_ERI, standard_world
from tests.fakes.kubeapi import KubeApiServer, install_crd
from tests.fakes.ports import free_port
from tests.integration.controller_support import FAST, add_node, eventually, ready_device
from tests.integration.proxy_support import CuttableProxy, proxied_kubeconfig

LEASE_SECONDS = 5.0  # renewDeadline 3.3 s: every outage below outlasts it, so leadership moves
WEBHOOK_PATHS = ("/validate-rdma-hca", "/mutate-pods-smcr")


def review() -> dict[str, Any]:
    """A pod asking for both resources: each webhook has something to decide about it."""
    limits = {"rdma/hca": "1", "aliyun/erdma": "1"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "probe",
            "annotations": {"network.alibabacloud.com/erdma-smcr": "true"},
        },
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]},
    }
    request = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "namespace": "ml",
        "object": pod,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@dataclass
class ControllerProcess:
    """`erdma controller` as a child process, with its health and webhook ports."""

    work: Path
    kubeconfig: Path
    ecs_endpoint: str
    health_port: int = field(default_factory=free_port)
    webhook_port: int = field(default_factory=free_port)
    lease_name: str = field(default_factory=lambda: f"erdma-chaos-{uuid.uuid4().hex[:6]}")
    lease_seconds: float = LEASE_SECONDS
    process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        config = {
            **FAST,
            "ecsEndpoint": self.ecs_endpoint,
            "ecsProtocol": "HTTP",
            "healthPort": self.health_port,
            "leaseName": self.lease_name,
            "leaseDurationSeconds": self.lease_seconds,
            "controllerNamespace": "default",
            "enableWebhook": True,
            "webhookPort": self.webhook_port,
            "certDir": str(self.work / "certs"),
            "smcInitImage": "erdma-k8s:chaos",
        }
        (self.work / "config.json").write_text(json.dumps(config))
        credential = {
            "accessKeyID": DEFAULT_ACCESS_KEY_ID,
            "accessKeySecret": DEFAULT_ACCESS_KEY_SECRET,
        }
        (self.work / "credential.json").write_text(json.dumps(credential))
        log = open(self.work / "controller.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "erdma",
                "controller",
                "--config-path",
                str(self.work / "config.json"),
                "--credential-path",
                str(self.work / "credential.json"),
                "--kubeconfig",
                str(self.kubeconfig),
                stdout=log,
                stderr=log,
                env={**os.environ},
            )
        finally:
            log.close()

    @property
    def exited(self) -> bool:
        return self.process is None or self.process.returncode is not None

    def log_tail(self, lines: int = 5) -> str:
        text = (self.work / "controller.log").read_text(errors="replace").splitlines()
        return " | ".join(text[-lines:])

    async def health(self) -> dict[str, Any] | None:
        url = f"http://127.0.0.1:{self.health_port}/healthz"
        try:
            async with aiohttp.ClientSession() as session, session.get(url) as resp:
                return dict(await resp.json()) if resp.status == 200 else None
        except (aiohttp.ClientError, OSError, ValueError):
            return None

    async def metric(self, name: str, **labels: str) -> float:
        """The value of a sample of its Prometheus ``/metrics`` (0 when absent)."""
        url = f"http://127.0.0.1:{self.health_port}/metrics"
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            text = await resp.text()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return float(sample.value)
        return 0.0

    async def leading(self) -> bool:
        return bool((await self.health() or {}).get("leader"))

    def tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.work / "certs" / "ca.crt"))
        context.check_hostname = False  # the certificate names the Service; we dial loopback
        return context

    async def webhooks_answer(self, session: aiohttp.ClientSession) -> str | None:
        """None when both webhooks answered a review, else what went wrong."""
        for path in WEBHOOK_PATHS:
            url = f"https://127.0.0.1:{self.webhook_port}{path}"
            try:
                async with session.post(url, json=review(), ssl=self.tls()) as resp:
                    if resp.status != 200 or "response" not in await resp.json():
                        return f"{path} answered HTTP {resp.status}"
            except (aiohttp.ClientError, OSError) as exc:
                return f"{path} unreachable: {type(exc).__name__}"
        return None

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 15)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


@dataclass
class Backdrop:
    """What each controller scenario stands on: a scratch directory, the real API server with
    the CRD installed, the ECS emulator, and an admin client of the server."""

    work: Path
    api: KubeApiServer
    emu: EcsEmulator
    client: AsyncClient


async def backdrop(stack: AsyncExitStack) -> Backdrop:
    """Start the `Backdrop` on ``stack``, which stops it all."""
    work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="erdma-chaos-")))
    api = stack.enter_context(KubeApiServer.start())
    await install_crd(api.kubeconfig)
    emu = stack.enter_context(EcsEmulator(standard_world()).in_thread())
    client = AsyncClient(KubeConfig.from_file(api.kubeconfig))
    stack.push_async_callback(client.close)
    return Backdrop(work, api, emu, client)


@dataclass
class Cluster:
    api: KubeApiServer
    proxy: CuttableProxy
    client: AsyncClient
    emu: EcsEmulator
    controller: ControllerProcess


@asynccontextmanager
async def cluster() -> AsyncIterator[Cluster]:
    """API server, ECS emulator, proxy and a leading controller with its webhooks serving."""
    async with AsyncExitStack() as stack:
        base = await backdrop(stack)
        work, api, emu, client = base.work, base.api, base.emu, base.client
        proxy = CuttableProxy(api.port)
        await proxy.start()
        stack.push_async_callback(proxy.close)
        kubeconfig = work / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(proxied_kubeconfig(api, proxy)))
        controller = ControllerProcess(work, kubeconfig, emu.endpoint)
        await controller.start()
        stack.push_async_callback(controller.stop)
        await eventually(controller.leading, timeout=60)
        async with aiohttp.ClientSession() as session:
            await eventually(lambda: _answered(controller, session), timeout=30)
        yield Cluster(api, proxy, client, emu, controller)


async def _answered(controller: ControllerProcess, session: aiohttp.ClientSession) -> bool:
    return await controller.webhooks_answer(session) is None


async def outage_trial(env: Cluster, seconds: float) -> tuple[list[str], float]:
    """Cut the API server for ``seconds`` and return (what broke, seconds to a Ready node)."""
    problems: list[str] = []
    controller = env.controller
    stop_probing = asyncio.Event()

    async def probe() -> None:
        # a review cut off mid-way would otherwise hang for aiohttp's default 5 minutes
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            while not stop_probing.is_set():
                if (why := await controller.webhooks_answer(session)) is not None:
                    problems.append(why)
                await asyncio.sleep(0.5)

    prober = asyncio.create_task(probe())
    await env.proxy.cut()
    await asyncio.sleep(seconds)
    await env.proxy.start()
    with stopwatch() as elapsed:
        try:
            name = await add_node(env.client, env.emu.world.add_instance(GENERAL_ERI.name))
            await eventually(lambda: ready_device(env.client, name), timeout=60)
        except AssertionError as exc:
            problems.append(f"no Ready node after the outage: {exc}")
        recovery = elapsed()
    stop_probing.set()
    await prober
    if controller.exited:
        problems.append(f"the controller exited: {controller.log_tail()}")
    if not await controller.leading():
        problems.append("the controller does not lead after the outage")
    return problems, recovery


async def outages(trials: Trials, seconds: float) -> None:
    async with cluster() as env:
        for _ in range(trials.count):
            problems, recovery = await outage_trial(env, seconds)
            trials.check(not problems, "; ".join(dict.fromkeys(problems)), recovery)
            if env.controller.exited:
                break  # the remaining trials would measure nothing


HOLDS = "no exit; both webhooks answered throughout; leads again; a new Node gets Ready"


@scenario(
    "API-server outage 8 s, leader election on", area="controller", full=5, short=1, holds=HOLDS
)
async def outage_8s(trials: Trials) -> None:
    await outages(trials, 4.0 if trials.short else 8.0)


@scenario(
    "API-server outage 30 s, leader election on", area="controller", full=3, short=1, holds=HOLDS
)
async def outage_30s(trials: Trials) -> None:
    await outages(trials, 6.0 if trials.short else 30.0)
