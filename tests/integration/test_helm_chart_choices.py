"""The Helm chart, value by value: what each documented choice installs (privileges, mounts,
replicas, webhooks, DRA) and what it leaves out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import yaml

from erdma.webhook import hostnetwork, smcr
from tests.helm_support import (
    Rendered,
    merge,
    render,
)
from tests.integration.helm_cases import AGENT, CASES, CONTROLLER, SHARED, agent_config

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_helm"]


# ---- specific facts ---------------------------------------------------------------------------


def _security(out: Rendered) -> tuple[dict[str, Any], dict[str, Any]]:
    pod = out.get("DaemonSet", AGENT)["spec"]["template"]["spec"]
    return pod, out.container("DaemonSet", AGENT)["securityContext"]


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


def test_smcr_in_prestart_makes_the_agent_privileged_and_mounts_cri(
    rendered: dict[str, Rendered],
) -> None:
    out = rendered["regular-auto-driver"]
    pod, security = _security(out)
    assert security == {"privileged": True, "readOnlyRootFilesystem": True, "runAsUser": 0}
    assert pod["hostNetwork"] is True and pod["hostPID"] is False
    mounts = {m["mountPath"] for m in out.container("DaemonSet", AGENT)["volumeMounts"]}
    assert {"/run/containerd", "/run/netns"} <= mounts


def test_webhook_smcr_leaves_the_agent_unprivileged_with_two_capabilities(
    rendered: dict[str, Rendered],
) -> None:
    out = rendered["regular-default-webhook-shared"]
    pod, security = _security(out)
    assert "privileged" not in security
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["SYS_MODULE", "NET_ADMIN"]}
    assert pod["hostNetwork"] is True and pod["hostPID"] is False
    assert "/run/containerd" not in {
        m["mountPath"] for m in out.container("DaemonSet", AGENT)["volumeMounts"]
    }
    assert yaml.safe_load(out.config_file(AGENT, "agent.yaml"))["prestartContainer"] is False


def test_local_ofed_agent_needs_neither_host_network_nor_net_admin(
    rendered: dict[str, Rendered],
) -> None:
    pod, security = _security(rendered["local-ofed"])
    assert pod["hostNetwork"] is False
    assert security["capabilities"]["add"] == ["SYS_MODULE"]


def test_nodes_with_a_prepared_driver_need_no_module_loading(
    rendered: dict[str, Rendered],
) -> None:
    values = merge(CASES["local-ofed"][0], {"agent": {"prepareNode": False}})
    out = render(values)
    _, security = _security(out)
    assert security["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"] for m in out.container("DaemonSet", AGENT)["volumeMounts"]}
    assert "/lib/modules" not in mounts
    assert "/lib/modules" in {
        m["mountPath"] for m in rendered["local-ofed"].container("DaemonSet", AGENT)["volumeMounts"]
    }


def test_host_namespace_adds_host_pid_and_the_setns_capabilities(
    rendered: dict[str, Rendered],
) -> None:
    out = rendered["regular-compat-rrsa-hostns"]
    pod, _ = _security(out)
    assert pod["hostPID"] is True
    # compat mode does SMC-R in PreStartContainer here, so the container is privileged anyway;
    # the capability list shows with the webhook path.
    values = merge(CASES["regular-compat-rrsa-hostns"][0], {"config": {"enableWebhook": True}})
    _, security = _security(render(values))
    assert security["capabilities"]["add"] == [
        "SYS_MODULE",
        "NET_ADMIN",
        "SYS_ADMIN",
        "SYS_CHROOT",
        "SYS_PTRACE",
    ]


def test_rrsa_annotates_the_controller_service_account(rendered: dict[str, Rendered]) -> None:
    account = rendered["regular-compat-rrsa-hostns"].get("ServiceAccount", CONTROLLER)
    assert account["metadata"]["annotations"] == {
        "pod-identity.alibabacloud.com/role-name": "erdma-controller"
    }


def test_cdi_strategy_mounts_the_cdi_spec_dir(rendered: dict[str, Rendered]) -> None:
    mounts = rendered["regular-compat-rrsa-hostns"].container("DaemonSet", AGENT)["volumeMounts"]
    assert "/var/run/cdi" in {m["mountPath"] for m in mounts}
    default = rendered["regular-auto-driver"].container("DaemonSet", AGENT)["volumeMounts"]
    assert "/var/run/cdi" not in {m["mountPath"] for m in default}


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


def _pod(resource: str | None, *, smcr: bool = False, host_network: bool = False,
         init: bool = False) -> dict[str, Any]:  # fmt: skip
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


def test_shared_daemonset_is_named_for_ack_and_needs_no_capability(
    rendered: dict[str, Rendered],
) -> None:
    out = rendered["regular-default-webhook-shared"]
    pod = out.get("DaemonSet", SHARED)["spec"]["template"]["spec"]
    security = out.container("DaemonSet", SHARED)["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert pod["hostNetwork"] is False
    ipv6 = rendered["local-default-shared-ipv6"].get("DaemonSet", SHARED)["spec"]["template"]
    assert ipv6["spec"]["hostNetwork"] is True
