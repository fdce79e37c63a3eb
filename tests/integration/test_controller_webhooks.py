"""`erdma controller` with webhooks on: certificates in a Secret, HTTPS served on each replica,
the hostNetwork rule and the SMC-R injector answering real AdmissionReview requests."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import aiohttp
from lightkube import AsyncClient, KubeConfig
from lightkube.resources.core_v1 import Secret

from erdma.controller.config import parse_config
from erdma.controller.main import run_controller
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import cloud_for, standard_world
from tests.fakes.ports import free_port

pytest_plugins = ["tests.integration.conftest_kubeapi"]


def _review(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": annotations or {}},
        "spec": spec,
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "ml",
            "object": pod,
        },
    }


async def _post(port: int, ca: Path, path: str, body: dict[str, Any]) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False  # the cert names the Service, we dial 127.0.0.1
    url = f"https://127.0.0.1:{port}{path}"
    async with aiohttp.ClientSession() as session, session.post(url, json=body, ssl=context) as r:
        assert r.status == 200
        return dict((await r.json())["response"])


async def test_controller_serves_both_webhooks_with_its_own_certificates(kube_api, tmp_path):
    port = free_port()
    config = parse_config(
        {
            "region": "cn-hangzhou",
            "healthPort": 0,
            "enableWebhook": True,
            "webhookPort": port,
            "certDir": str(tmp_path),
            "controllerNamespace": "default",
            "controllerName": "erdma-webhook-test",
            "smcInitImage": "erdma-k8s:test",
        }
    )
    with EcsEmulator(standard_world()).in_thread() as emu:
        task = asyncio.create_task(
            run_controller(
                config, cloud_for(emu), kubeconfig=kube_api.kubeconfig, leader_elect=False
            )
        )
        try:
            for _ in range(100):
                if (tmp_path / "ca.crt").exists() and not task.done():
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.3)
            ca = tmp_path / "ca.crt"
            worker = {"name": "w", "image": "x", "resources": {"limits": {"rdma/hca": "1"}}}
            denied = await _post(port, ca, "/validate-rdma-hca", _review({"containers": [worker]}))
            assert denied["allowed"] is False and "hostNetwork" in denied["status"]["message"]
            host_pod = _review({"containers": [worker], "hostNetwork": True})
            allowed = await _post(port, ca, "/validate-rdma-hca", host_pod)
            assert allowed["allowed"] is True
            smc = {"name": "w", "image": "x", "resources": {"limits": {"aliyun/erdma": "1"}}}
            smc_pod = _review(
                {"containers": [smc]}, {"network.alibabacloud.com/erdma-smcr": "true"}
            )
            mutated = await _post(port, ca, "/mutate-pods-smcr", smc_pod)
            assert mutated["allowed"] is True and mutated["patchType"] == "JSONPatch"

            client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
            secret = await client.get(
                Secret, "erdma-webhook-test-webhook-cert", namespace="default"
            )
            assert secret.data is not None and set(secret.data) >= {"tls.crt", "tls.key", "ca.crt"}
            await client.delete(Secret, "erdma-webhook-test-webhook-cert", namespace="default")
            await client.close()
        finally:
            task.cancel()
            await asyncio.wait({task}, timeout=60)
