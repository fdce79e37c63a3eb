"""The Helm chart, value by value: what each documented choice installs (replicas, webhooks,
DRA, monitoring) and what it leaves out; privileges and host paths are in test_helm_privileges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy

from erdma.webhook import hostnetwork, smcr
from tests.helm_support import Rendered
from tests.integration.helm_cases import AGENT, CONTROLLER, agent_config

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_helm"]


# ---- specific facts ---------------------------------------------------------------------------


def test_local_mode_installs_no_controller(rendered: dict[str, Rendered]) -> None:
    out = rendered["local-ofed"]
    assert out.all("Deployment") == []
    assert out.find("ClusterRole", CONTROLLER) is None
    assert out.find("ServiceAccount", CONTROLLER) is None
    assert out.find("CustomResourceDefinition", "erdmadevices.network.alibabacloud.com")


def test_regular_controller_has_two_replicas_leader_election_and_probes(
    rendered: dict[str, Rendered],
) -> None:
    out = rendered["regular-auto-driver"]
    deployment = out.get("Deployment", CONTROLLER)
    container = out.container("Deployment", CONTROLLER)
    assert deployment["spec"]["replicas"] == 2
    budget = out.get("PodDisruptionBudget", CONTROLLER)["spec"]
    assert budget["minAvailable"] == 1
    assert budget["selector"] == deployment["spec"]["selector"]
    assert container["args"][0] == "controller" and "--leader-elect" in container["args"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_rrsa_annotates_the_controller_service_account(rendered: dict[str, Rendered]) -> None:
    account = rendered["regular-compat-rrsa-hostns"].get("ServiceAccount", CONTROLLER)
    assert account["metadata"]["annotations"] == {
        "pod-identity.alibabacloud.com/role-name": "erdma-controller"
    }


def test_dra_settings_reach_the_agent_with_kubelets_plugin_dirs(
    rendered: dict[str, Rendered], tmp_path: Path
) -> None:
    out = rendered["regular-dra"]
    config = agent_config(out, AGENT, tmp_path)
    assert config.dra.enabled and config.dra.devices == ["erdma_1"]
    assert config.dra.unhealthy == "taint"
    mounts = {m["mountPath"] for m in out.container("DaemonSet", AGENT)["volumeMounts"]}
    assert {"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins"} <= mounts
    assert "/var/run/cdi" in mounts  # per-claim CDI specs
    assert out.all("DeviceClass") and out.all("ResourceSlice") == []
    default = rendered["regular-auto-driver"]
    assert not agent_config(default, AGENT, tmp_path).dra.enabled
    assert default.all("DeviceClass") == []
    off = {m["mountPath"] for m in default.container("DaemonSet", AGENT)["volumeMounts"]}
    assert "/var/lib/kubelet/plugins_registry" not in off


def test_service_monitor_scrapes_the_agents(rendered: dict[str, Rendered]) -> None:
    out = rendered["regular-compat-rrsa-hostns"]
    monitor = out.get("ServiceMonitor", AGENT)
    service = out.get("Service", f"{AGENT}-metrics")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert rendered["regular-auto-driver"].all("ServiceMonitor") == []


def test_webhooks_only_when_enabled_and_without_ca_bundle(rendered: dict[str, Rendered]) -> None:
    assert rendered["regular-auto-driver"].all("MutatingWebhookConfiguration") == []
    assert rendered["regular-auto-driver"].all("ValidatingWebhookConfiguration") == []
    out = rendered["regular-default-webhook-shared"]
    (mutating,) = out.get("MutatingWebhookConfiguration", CONTROLLER)["webhooks"]
    (validating,) = out.get("ValidatingWebhookConfiguration", CONTROLLER)["webhooks"]
    assert mutating["clientConfig"]["service"]["path"] == smcr.PATH
    assert validating["clientConfig"]["service"]["path"] == hostnetwork.PATH
    for hook in (mutating, validating):
        assert hook["failurePolicy"] == "Fail" and hook["timeoutSeconds"] == 10
        assert "caBundle" not in hook["clientConfig"]
    assert out.get("Service", CONTROLLER)["spec"]["ports"][0]["targetPort"] == "webhook"


def _pod(
    resource: str | None, *, smcr: bool = False, host_network: bool = False, init: bool = False
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "app"}
    if resource:
        container["resources"] = {"limits": {resource: "1"}}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "app"}]}
    spec.setdefault("initContainers" if init else "containers", []).append(container)
    if host_network:
        spec["hostNetwork"] = True
    annotations = {"network.alibabacloud.com/erdma-smcr": "true"} if smcr else {}
    return {"metadata": {"name": "p", "annotations": annotations}, "spec": spec}


def _called(hook: dict[str, Any], pod: dict[str, Any]) -> bool:
    """Whether the API server would send `pod` to `hook`: every matchCondition holds (CEL)."""
    env = celpy.Environment()
    activation = {"object": celpy.json_to_cel(pod)}
    return all(
        bool(env.program(env.compile(c["expression"])).evaluate(activation))
        for c in hook["matchConditions"]
    )


def test_webhooks_are_called_only_for_rdma_pods(rendered: dict[str, Rendered]) -> None:
    out = rendered["regular-default-webhook-shared"]
    (mutating,) = out.get("MutatingWebhookConfiguration", CONTROLLER)["webhooks"]
    (validating,) = out.get("ValidatingWebhookConfiguration", CONTROLLER)["webhooks"]
    assert _called(mutating, _pod("aliyun/erdma", smcr=True))
    assert _called(mutating, _pod("aliyun/erdma", smcr=True, init=True))
    assert not _called(mutating, _pod("aliyun/erdma"))
    assert not _called(mutating, _pod("aliyun/erdma", smcr=True, host_network=True))
    assert not _called(mutating, _pod(None, smcr=True))
    assert _called(validating, _pod("rdma/hca"))
    assert _called(validating, _pod("rdma/hca", init=True))
    assert not _called(validating, _pod("rdma/hca", host_network=True))
    assert not _called(validating, _pod("aliyun/erdma"))
    # The controller's own pods never wait for the controller, whatever the failurePolicy.
    own = out.get("Deployment", CONTROLLER)["spec"]["template"]
    assert not _called(mutating, own) and not _called(validating, own)
