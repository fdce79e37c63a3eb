"""Leadership lost in an API-server outage must not cut the webhooks' or probes' connections,
and a replica cut off from the API server reads not ready until it answers again.

The API server keeps connections to a webhook open between reviews, and so does a prober. When
the controller loses its lease the operator stops; whatever it stops must be its own work only.
"""

from __future__ import annotations

import asyncio
import ssl
import uuid
from pathlib import Path

import aiohttp
import yaml

from bench.chaos.apiserver_faults import review
from erdma.controller.config import parse_config
from erdma.controller.main import run_controller
from tests.fakes.ecs.client import cloud_for
from tests.fakes.kubeapi import KubeApiServer
from tests.fakes.ports import free_port
from tests.integration.controller_support import FAST, eventually
from tests.integration.proxy_support import CuttableProxy, proxied_kubeconfig

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]


async def test_keepalive_connections_survive_a_leadership_loss(
    kube_api: KubeApiServer, emu, tmp_path
):
    proxy = CuttableProxy(kube_api.port)
    await proxy.start()
    kubeconfig = Path(tmp_path) / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(proxied_kubeconfig(kube_api, proxy)))
    health_port, webhook_port = free_port(), free_port()
    config = parse_config(
        {
            **FAST,
            "leaseName": f"erdma-{uuid.uuid4().hex[:6]}",
            "leaseDurationSeconds": 3.0,
            "controllerNamespace": "default",
            "controllerName": f"wh-{uuid.uuid4().hex[:6]}",
            "enableWebhook": True,
            "webhookPort": webhook_port,
            "certDir": str(tmp_path / "certs"),
            "smcInitImage": "erdma-k8s:test",
        }
    )
    replica = asyncio.create_task(
        run_controller(config, cloud_for(emu), kubeconfig=kubeconfig, health_port=health_port)
    )
    health_url = f"http://127.0.0.1:{health_port}/healthz"
    try:
        # a cut connection would otherwise hang for aiohttp's default 5 minutes
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:

            async def leader() -> bool | None:
                try:
                    async with session.get(health_url) as resp:
                        return bool((await resp.json())["leader"])
                except aiohttp.ClientConnectionError:
                    return None

            async def mutated() -> bool:
                url = f"https://127.0.0.1:{webhook_port}/mutate-pods-smcr"
                tls = ssl.create_default_context(cafile=str(tmp_path / "certs" / "ca.crt"))
                tls.check_hostname = False  # the certificate names the Service
                async with session.post(url, json=review(), ssl=tls) as resp:
                    return resp.status == 200

            await eventually(leader, timeout=30)
            assert await mutated()  # opens the keep-alive connections, while leading
            await proxy.cut()
            await eventually(lambda: _standing_by(leader), timeout=60)
            assert await mutated(), "the webhook connection was cut with the operator"
            assert await leader() is False, "the probe connection was cut with the operator"
            assert not replica.done()

            async def ready() -> int:
                async with session.get(f"http://127.0.0.1:{health_port}/readyz") as resp:
                    return resp.status

            await eventually(lambda: _is(ready, 503), timeout=60)  # cut off past a lease
            await proxy.start()
            await eventually(lambda: _is(ready, 200), timeout=60)
    finally:
        replica.cancel()
        await asyncio.wait({replica}, timeout=60)
        await proxy.close()


async def _is(status, wanted: int) -> bool:
    return await status() == wanted


async def _standing_by(leader) -> bool:
    return await leader() is False
