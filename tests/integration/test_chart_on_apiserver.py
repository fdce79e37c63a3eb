"""The rendered chart installed on a real API server (kube-testserver) with `kubectl apply
--server-side`, the controller serving its webhooks, and pods created through the API server:
the API server itself calls the webhooks (the chart's Service is mapped to the controller's
local port), so injection, denial and failurePolicy are what a cluster would do.

The ServiceMonitor is applied too, against prometheus-operator's own CRD (tests/integration/
upstream). The pre-delete hook Job is not installed: `helm install` does not create hooks (and
the test server serves no batch/v1); tests/integration/test_uninstall_docs.py runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.admissionregistration_v1 import (
    MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration,
)
from lightkube.resources.core_v1 import Pod

from erdma.controller.config import parse_config
from erdma.controller.main import run_controller
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import cloud_for, standard_world
from tests.fakes.kubeapi import KubeApiServer
from tests.fakes.ports import free_port
from tests.helm_support import ACCESS_KEY, Rendered, merge, render
from tests.integration import kubectl_support as kc
from tests.integration import reference_chart as ref
from tests.kubeapi_support import api_server_or_skip

NS = "kube-system"
SERVICE = f"{NS}/{ref.CONTROLLER}"
UPSTREAM = Path(__file__).parent / "upstream" / "monitoring.coreos.com_servicemonitors.yaml.gz"
#: a default Regular-mode install (smcr.mode=auto: the webhook injects smcr-init) with shared
#: RDMA, whose rule goes through the controller's webhook: kube-testserver serves no
#: ValidatingAdmissionPolicy, which `auto` would choose for its version (1.30+)
VALUES = merge(
    ACCESS_KEY,
    {
        "sharedRdma": {"enabled": True, "admissionPolicy": False},
        "metrics": {"serviceMonitor": {"enabled": True}},
    },
)


@pytest.fixture(scope="module")
def webhook_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def api(webhook_port: int) -> Iterator[KubeApiServer]:
    kc.kubectl_or_skip()
    server = api_server_or_skip(service_endpoints={SERVICE: f"127.0.0.1:{webhook_port}"})
    with server:
        yield server


@pytest.fixture(scope="module")
def installed(api: KubeApiServer) -> Rendered:
    out = render(VALUES, namespace=NS)
    servicemonitor_crd = yaml.safe_load(gzip.decompress(UPSTREAM.read_bytes()))
    kc.install(api.kubeconfig, out, [servicemonitor_crd])
    return out


@pytest.fixture
async def k8s(api: KubeApiServer) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(KubeConfig.from_file(api.kubeconfig))
    yield client
    async for pod in client.list(Pod, namespace="default"):
        assert pod.metadata is not None and pod.metadata.name is not None
        await client.delete(Pod, pod.metadata.name, namespace="default")
    await client.close()


def test_every_rendered_object_is_stored(api: KubeApiServer, installed: Rendered) -> None:
    for obj in kc.release_objects(installed):
        meta = obj["metadata"]
        where = ["-n", meta["namespace"]] if "namespace" in meta else []
        got = kc.kubectl(api.kubeconfig, "get", obj["kind"], meta["name"], *where, "-o", "name")
        assert got.returncode == 0, f"{obj['kind']}/{meta['name']}: {got.stderr}"
    kinds = {o["kind"] for o in kc.release_objects(installed)}
    wanted = {
        "ServiceMonitor",
        "DaemonSet",
        "Deployment",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "PodDisruptionBudget",
        "ClusterRole",
    }
    assert wanted <= kinds


@contextlib.asynccontextmanager
async def controller_running(
    api: KubeApiServer, out: Rendered, port: int, tmp: Path
) -> AsyncIterator[asyncio.Task[None]]:
    """The controller with the chart's config.json, listening where the Service is mapped;
    stopped (as on SIGTERM) when the block ends."""
    config = json.loads(out.config_file(ref.CONTROLLER, "config.json"))
    config.update(webhookPort=port, healthPort=0, certDir=str(tmp / "certs"))
    stop = asyncio.Event()
    with EcsEmulator(standard_world()).in_thread() as emu:
        task = asyncio.create_task(
            run_controller(
                parse_config(config),
                cloud_for(emu),
                kubeconfig=api.kubeconfig,
                leader_elect=False,
                stop=stop,
            )
        )
        try:
            yield task
        finally:
            stop.set()
            await asyncio.wait_for(task, timeout=30)


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 20) -> Any:
    """The value of ``check`` once it is truthy (webhook configurations reach the API server's
    admission informers a moment after they are written)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        got = await check()
        if got or asyncio.get_running_loop().time() > deadline:
            return got
        await asyncio.sleep(0.2)


def pod(name: str, resource: str, *, smcr: bool = False, host_network: bool = False) -> Pod:
    annotations = {"network.alibabacloud.com/erdma-smcr": "true"} if smcr else {}
    return cast(
        Pod,
        Pod.from_dict(
            {
                "metadata": {"name": name, "namespace": "default", "annotations": annotations},
                "spec": {
                    "hostNetwork": host_network,
                    "containers": [
                        {
                            "name": "app",
                            "image": "busybox",
                            "resources": {"limits": {resource: "1"}},
                        }
                    ],
                },
            }
        ),
    )


async def create(k8s: AsyncClient, obj: Pod) -> Pod | str:
    """The stored pod, or the API server's refusal message."""
    try:
        return await k8s.create(obj)
    except ApiError as exc:
        return exc.status.message or ""


async def ca_bundles(k8s: AsyncClient) -> bool:
    mutating = await k8s.get(MutatingWebhookConfiguration, ref.CONTROLLER)
    validating = await k8s.get(ValidatingWebhookConfiguration, ref.CONTROLLER)
    bundles = [h.clientConfig.caBundle for h in mutating.webhooks or []]
    bundles += [h.clientConfig.caBundle for h in validating.webhooks or []]
    return bool(bundles) and all(bundles)


def init_names(created: Pod | str) -> list[str]:
    assert isinstance(created, Pod), created
    return [c.name for c in (created.spec.initContainers if created.spec else None) or []]


async def test_webhooks_through_the_api_server_and_failure_policy_when_down(
    api: KubeApiServer, installed: Rendered, webhook_port: int, k8s: AsyncClient, tmp_path: Path
) -> None:
    async with controller_running(api, installed, webhook_port, tmp_path) as task:
        assert await eventually(lambda: ca_bundles(k8s)), "the controller set no caBundle"
        injected = await eventually(lambda: create(k8s, pod("smcr-1", "aliyun/erdma", smcr=True)))
        assert init_names(injected) == ["smcr-init"]
        plain = await create(k8s, pod("plain-1", "aliyun/erdma"))
        assert init_names(plain) == []
        denied = await create(k8s, pod("hca-1", "rdma/hca"))
        assert isinstance(denied, str) and "is not hostNetwork" in denied, denied
        assert "rdma-hca.erdma.alibabacloud.com" in denied
        assert isinstance(await create(k8s, pod("hca-2", "rdma/hca", host_network=True)), Pod)
    assert task.done()

    # controller down, failurePolicy Ignore (the default): pods go through unchecked
    assert init_names(await create(k8s, pod("smcr-2", "aliyun/erdma", smcr=True))) == []
    assert isinstance(await create(k8s, pod("hca-3", "rdma/hca")), Pod)

    # the same release upgraded to failurePolicy Fail: matching pods are refused, others are not
    # (without the certificate Secret: on an upgrade the chart's lookup finds it and renders none)
    upgraded = render(merge(VALUES, {"webhookFailurePolicy": "Fail"}), namespace=NS)
    cert = ("Secret", f"{ref.CONTROLLER}-webhook-cert")
    objects = kc.release_objects(upgraded)
    kc.apply(api.kubeconfig, [o for o in objects if (o["kind"], o["metadata"]["name"]) != cert])

    async def refused() -> str | None:
        got = await create(k8s, pod("hca-4", "rdma/hca"))
        return got if isinstance(got, str) else None

    message = await eventually(refused)
    assert message and "failed calling webhook" in message and "rdma-hca" in message
    smcr = await create(k8s, pod("smcr-3", "aliyun/erdma", smcr=True))
    assert isinstance(smcr, str) and "smcr.erdma.alibabacloud.com" in smcr
    assert isinstance(await create(k8s, pod("unrelated", "cpu")), Pod)  # matchConditions
    # the upgrade (applied by Helm's field manager) left the controller's caBundle in place
    assert await ca_bundles(k8s)


def test_upgrade_over_a_reference_release_keeps_its_selectors(api: KubeApiServer) -> None:
    """The reference release's DaemonSet and Deployment, then this chart's over them with the
    same names (Helm patches objects of the same name). kube-apiserver refuses a changed
    selector; this test server does not check it, so the test reads the stored selector."""
    ns = "migration"
    existing = [
        ref.workload("DaemonSet", ref.AGENT, ns, "erdma", "agent"),
        ref.workload("Deployment", ref.CONTROLLER, ns, "erdma", "controller"),
    ]
    kc.apply(api.kubeconfig, existing)
    out = render(
        merge(
            ref.VALUES,
            {
                "agent": {"image": {"repository": "docker.io/erdma-k8s/erdma"}},
                "controller": {"image": {"repository": ""}},
            },
            ACCESS_KEY,
        ),
        namespace=ns,
    )
    ours = [out.get("DaemonSet", ref.AGENT), out.get("Deployment", ref.CONTROLLER)]
    kc.apply(api.kubeconfig, ours, "--force-conflicts")
    for before in existing:
        got = kc.kubectl(
            api.kubeconfig,
            "get",
            before["kind"],
            before["metadata"]["name"],
            "-n",
            ns,
            "-o",
            "json",
        )
        stored = json.loads(got.stdout)["spec"]
        assert stored["selector"] == before["spec"]["selector"]
        assert stored["template"]["spec"]["containers"][0]["image"].startswith(
            "docker.io/erdma-k8s/"
        )
