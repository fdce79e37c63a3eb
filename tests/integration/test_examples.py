"""The workloads in examples/ go through a real API server (`kubectl apply --dry-run=server`) and
through the controller's webhook handlers as the rendered chart configures them, and the chart
renders with each example values file into configuration the programs accept."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from erdma.api.names import ERDMA_RESOURCE, SMCR_ANNOTATION
from erdma.controller.webhooks import webhook_routes
from erdma.webhook import hostnetwork, smcr
from erdma.webhook.review import AdmissionRequest, Handler, Verdict
from tests.fakes.kubeapi import KubeApiServer
from tests.helm_support import Rendered, render
from tests.integration.chart_programs import agent_loads, controller_loads
from tests.integration.helm_cases import AGENT, CONTROLLER
from tests.integration.kubectl_support import kubectl

pytest_plugins = ["tests.integration.conftest_kubeapi"]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MANIFESTS = ("smcr-deployment.yaml", "nccl-statefulset.yaml", "rdma-hca-job.yaml")
NAMESPACE = "erdma-system"


def objects(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def values(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return loaded


def pod_of(workload: dict[str, Any]) -> dict[str, Any]:
    """The Pod a workload's controller would create from its template."""
    template = copy.deepcopy(workload["spec"]["template"])
    template.setdefault("metadata", {})
    return {"apiVersion": "v1", "kind": "Pod", **template}


def admit(handler: Handler, pod: dict[str, Any]) -> Verdict:
    return handler(AdmissionRequest("uid-1", "CREATE", "Pod", "default", pod))


def secret_env(out: Rendered) -> dict[str, str]:
    """The controller's environment from the existingSecret the values name (a value per key)."""
    env = out.container("Deployment", CONTROLLER).get("env", [])
    refs = {
        e["name"]: e["valueFrom"]["secretKeyRef"]
        for e in env
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    return {name: f"{ref['name']}/{ref['key']}" for name, ref in refs.items()}


@pytest.fixture(scope="module")
def regular() -> Rendered:
    return render(values("values-regular.yaml"), NAMESPACE)


@pytest.fixture(scope="module")
def routes(regular: Rendered, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Handler]:
    """The webhook handlers the controller serves with the Regular-mode values."""
    tmp = tmp_path_factory.mktemp("controller")
    return webhook_routes(controller_loads(regular, tmp, env=secret_env(regular)))


#: kinds kube-testserver does not serve: their Pod template goes through the server instead
NOT_SERVED = {"StatefulSet": "-0", "Job": "-x7k2p"}


def dry_run(kube_api: KubeApiServer, obj: dict[str, Any]) -> str:
    done = kubectl(
        kube_api.kubeconfig,
        "apply",
        "--dry-run=server",
        "-n",
        "default",
        "-f",
        "-",
        stdin=json.dumps(obj),
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("name", MANIFESTS)
def test_each_manifest_is_accepted_by_the_api_server(kube_api: KubeApiServer, name: str) -> None:
    for obj in objects(name):
        if obj["kind"] in NOT_SERVED:
            pod = pod_of(obj)
            pod["metadata"]["name"] = obj["metadata"]["name"] + NOT_SERVED[obj["kind"]]
            assert "created (server dry run)" in dry_run(kube_api, pod)
        else:
            assert f"/{obj['metadata']['name']} created (server dry run)" in dry_run(kube_api, obj)


def test_smcr_deployment_gets_the_init_container_and_stays_valid(
    kube_api: KubeApiServer, routes: dict[str, Handler]
) -> None:
    (deployment,) = objects("smcr-deployment.yaml")
    pod = pod_of(deployment)
    assert pod["metadata"]["annotations"][SMCR_ANNOTATION] == "true"
    verdict = admit(routes[smcr.PATH], pod)
    assert verdict.allowed
    (op,) = verdict.patch
    assert op["path"] == "/spec/initContainers"
    (init,) = op["value"]
    assert init["name"] == smcr.CONTAINER_NAME and init["command"] == ["erdma", "smcr-init"]
    assert init["resources"]["limits"] == {ERDMA_RESOURCE: "1"}
    # what the API server would store after the mutation is a valid Pod too
    patched = {
        **pod,
        "metadata": {**pod["metadata"], "name": "app-with-erdma-0"},
        "spec": {**pod["spec"], "initContainers": op["value"]},
    }
    assert "created (server dry run)" in dry_run(kube_api, patched)
    # the reference controller's path answers the same
    assert admit(routes[smcr.REFERENCE_PATH], pod).patch == verdict.patch


def test_rdma_hca_job_is_allowed_because_it_is_host_network(routes: dict[str, Handler]) -> None:
    (job,) = objects("rdma-hca-job.yaml")
    pod = pod_of(job)
    assert admit(routes[hostnetwork.PATH], pod).allowed
    assert not admit(routes[smcr.PATH], pod).patch
    # the same pod without hostNetwork is what the webhook exists to refuse
    pod["spec"]["hostNetwork"] = False
    refused = admit(routes[hostnetwork.PATH], pod)
    assert not refused.allowed and "requests rdma/hca, but the pod is not hostNetwork" in (
        refused.message
    )


def test_nccl_statefulset_passes_both_webhooks_untouched(routes: dict[str, Handler]) -> None:
    service, statefulset = objects("nccl-statefulset.yaml")
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"] == "nccltest"
    pod = pod_of(statefulset)
    assert admit(routes[hostnetwork.PATH], pod).allowed
    assert not admit(routes[smcr.PATH], pod).patch
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "INFO", "NCCL_IB_GID_INDEX": "1"}
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8", ERDMA_RESOURCE: "1"}


def test_regular_values_render_into_configuration_the_programs_accept(
    regular: Rendered, tmp_path: Path
) -> None:
    agent = agent_loads(regular, AGENT, tmp_path)
    assert agent.local_eri_discovery is False and agent.allocate_all_devices is True
    controller = controller_loads(regular, tmp_path, env=secret_env(regular))
    assert controller.enable_init_container_inject and controller.enable_device_plugin
    assert secret_env(regular) == {
        "ALIBABA_CLOUD_ACCESS_KEY_ID": "erdma-access-key/accessKeyID",
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "erdma-access-key/accessKeySecret",
    }


def test_local_values_render_an_agent_only_install(tmp_path: Path) -> None:
    out = render(values("values-local.yaml"), NAMESPACE)
    assert out.find("Deployment", CONTROLLER) is None
    agent = agent_loads(out, AGENT, tmp_path)
    assert agent.local_eri_discovery is True
    assert agent.exposed_local_eris == ["i-* erdma_*"]
    assert agent.prestart_container is True


def test_the_examples_readme_lists_every_example() -> None:
    text = (EXAMPLES / "README.md").read_text()
    shown = sorted(
        p.relative_to(EXAMPLES).as_posix()
        for p in EXAMPLES.rglob("*")
        if p.is_file() and p.name != "README.md"
    )
    missing = [name for name in shown if f"]({name})" not in text]
    assert not missing, f"examples/README.md does not link: {missing}"
