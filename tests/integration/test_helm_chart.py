"""The Helm chart: what each values set installs, that the programs accept what it configures,
that Kubernetes accepts every object, and that bad values stop `helm install` naming the key."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any, cast

import celpy
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import ConfigMap, Secret

from erdma.agent.config import AgentConfig, build_config
from erdma.controller.config import parse_config
from erdma.controller.credentials import CredentialSettings
from erdma.kube.client import ERdmaDeviceResource
from erdma.webhook import hostnetwork, smcr
from tests.fakes.kubeapi import CRD_MANIFEST, KubeApiServer
from tests.helm_support import (
    ACCESS_KEY,
    KUBE_VERSION,
    Rendered,
    chart_defaults,
    lint_findings,
    merge,
    render,
)

pytest_plugins = ["tests.integration.conftest_kubeapi"]

AGENT = "alibabacloud-erdma-agent"
CONTROLLER = "alibabacloud-erdma-controller"
SHARED = "ack-rdma-dp-ds"

#: id -> (values, release namespace); covers both modes, every driver, webhook and shared on/off.
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "regular-auto-driver": (
        merge(ACCESS_KEY, {"agent": {"runtimeSocket": "/run/containerd/containerd.sock"}}),
        "kube-system",
    ),
    "regular-default-webhook-shared": (
        merge(
            ACCESS_KEY,
            {
                "agent": {"preferDriver": "default", "slotsPerDevice": 50, "jumboFrameMTU": 9000},
                "config": {"enableWebhook": True, "region": "cn-hangzhou"},
                "sharedRdma": {"enabled": True, "capacity": 500},
                "nodeSelector": {"erdma.alibabacloud.com/enabled": "true"},
                "webhookFailurePolicy": "Fail",
            },
        ),
        "erdma-system",
    ),
    "regular-compat-rrsa-hostns": (
        {
            "credentials": {"type": "oidc_role_arn", "roleName": "erdma-controller"},
            "agent": {
                "preferDriver": "compat",
                "hostNamespace": True,
                "deviceListStrategy": "cdi-cdi-devices",
                "nccl": {"gidIndex": 1, "overrides": {"NCCL_DEBUG": "INFO"}},
            },
            "metrics": {"serviceMonitor": {"enabled": True}},
        },
        "networking",
    ),
    "local-ofed": (
        {
            "config": {"localERIDiscovery": True},
            "agent": {
                "preferDriver": "ofed",
                "exposedLocalERIs": ["i-* erdma_*", "i-bp1abc erdma_0/erdma_1"],
            },
        },
        "kube-system",
    ),
    "regular-dra": (
        merge(
            ACCESS_KEY,
            {"dra": {"enabled": True, "devices": ["erdma_1"], "unhealthy": "taint"}},
        ),
        "kube-system",
    ),
    "local-default-shared-ipv6": (
        {
            "config": {"localERIDiscovery": True},
            "agent": {"preferDriver": "default", "allocateAllDevices": True},
            "sharedRdma": {
                "enabled": True,
                "nonHostNetworkRdma": True,
                "selectors": {"ibdevNames": ["mlx5_*"], "vendors": ["15b3"]},
            },
        },
        "rdma",
    ),
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, Rendered]:
    return {case: render(values, ns) for case, (values, ns) in CASES.items()}


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest, rendered: dict[str, Rendered]) -> tuple[str, Rendered]:
    return request.param, rendered[request.param]


def _agent_config(out: Rendered, configmap: str, tmp_path: Path) -> AgentConfig:
    """What `erdma agent --config` makes of the ConfigMap file, on a node named node-a."""
    path = tmp_path / f"{configmap}.yaml"
    path.write_text(out.config_file(configmap, "agent.yaml"))
    return build_config(path, environ={"NODE_NAME": "node-a"})


# ---- every case -----------------------------------------------------------------------------


def test_lint_is_clean(case: tuple[str, Rendered]) -> None:
    name, _ = case
    values, namespace = CASES[name]
    assert lint_findings(values, namespace) == []


def test_every_object_is_valid_kubernetes(case: tuple[str, Rendered]) -> None:
    _, out = case
    for obj in out.objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            # Only the prometheus-operator CRD kind has no built-in schema.
            assert obj["apiVersion"] == "monitoring.coreos.com/v1", where
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{where}: {exc.message} at {list(exc.path)}")


def test_agent_config_is_accepted_by_the_agent(case: tuple[str, Rendered], tmp_path: Path) -> None:
    name, out = case
    values, _ = CASES[name]
    config = _agent_config(out, AGENT, tmp_path)
    agent = merge(chart_defaults()["agent"], values.get("agent", {}))
    seen = config.model_dump(mode="json", by_alias=True)
    assert seen["nodeName"] == "node-a"
    assert seen["resources"] == ["aliyun/erdma"]
    assert seen["localERIDiscovery"] == values.get("config", {}).get("localERIDiscovery", False)
    for key in ("preferDriver", "allocateAllDevices", "exposedLocalERIs", "slotsPerDevice",
                "deviceListStrategy", "hostNamespace", "driverInstallCommand", "prepareNode",
                "jumboFrameMTU", "runtimeSocket"):  # fmt: skip
        assert seen[key] == agent[key], key
    for key in ("enabled", "socketIfname", "gidIndex", "overrides"):
        assert seen["nccl"][key] == agent["nccl"][key], f"nccl.{key}"
    assert seen["metricsPort"] == agent["metrics"]["port"]


def test_shared_config_is_accepted_by_the_agent(case: tuple[str, Rendered], tmp_path: Path) -> None:
    name, out = case
    values, _ = CASES[name]
    shared = values.get("sharedRdma", {})
    if not shared.get("enabled"):
        assert out.find("DaemonSet", SHARED) is None
        assert out.find("ConfigMap", SHARED) is None
        return
    config = _agent_config(out, SHARED, tmp_path)
    assert config.model_dump(mode="json")["resources"] == ["shared"]
    assert config.prepare_node is False  # the shared DaemonSet never loads erdma
    (resource,) = config.shared_resources
    assert resource.name == "rdma/hca"
    assert resource.capacity == shared.get("capacity", 1000)
    assert config.non_host_network_rdma == shared.get("nonHostNetworkRdma", False)
    for key, wanted in shared.get("selectors", {}).items():
        assert resource.selectors.model_dump(by_alias=True)[key] == wanted
    assert config.metrics_port != _agent_config(out, AGENT, tmp_path).metrics_port


def test_controller_config_and_credentials_are_accepted(case: tuple[str, Rendered]) -> None:
    name, out = case
    values, namespace = CASES[name]
    if values.get("config", {}).get("localERIDiscovery"):
        assert out.find("Deployment", CONTROLLER) is None
        assert out.find("ConfigMap", CONTROLLER) is None
        assert out.find("Secret", f"{CONTROLLER}-credential") is None
        return
    config = parse_config(json.loads(out.config_file(CONTROLLER, "config.json")))
    assert config.controller_namespace == namespace
    assert config.controller_name == CONTROLLER
    assert config.node_selector == values.get("nodeSelector", {})
    assert config.enable_webhook == values.get("config", {}).get("enableWebhook", False)
    assert config.smc_init_image == out.container("DaemonSet", AGENT)["image"]
    credentials = values["credentials"]
    settings = CredentialSettings.from_mapping(
        out.secret_json(f"{CONTROLLER}-credential", "credential.json")
    )
    assert settings.type == credentials["type"]
    assert settings.access_key_id == credentials.get("accessKeyID", "")


def test_objects_live_in_the_release_namespace(case: tuple[str, Rendered]) -> None:
    _, out = case
    for obj in out.objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        cluster_scoped = obj["kind"] in (
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
            "DeviceClass",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        )
        assert obj["metadata"].get("namespace") == (None if cluster_scoped else out.namespace), (
            where
        )
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == out.namespace, where
        for hook in obj.get("webhooks", []):
            assert hook["clientConfig"]["service"]["namespace"] == out.namespace, where


def test_pods_get_no_service_link_env(case: tuple[str, Rendered]) -> None:
    """Service links would inject ERDMA_*-looking variables that the programs read as config."""
    _, out = case
    workloads = out.all("DaemonSet") + out.all("Deployment")
    assert workloads
    for obj in workloads:
        assert obj["spec"]["template"]["spec"]["enableServiceLinks"] is False, obj["metadata"]


def test_rbac_grants_no_wildcards(case: tuple[str, Rendered]) -> None:
    _, out = case
    for role in out.all("ClusterRole") + out.all("Role"):
        for rule in role["rules"]:
            for field in ("verbs", "resources", "apiGroups"):
                assert "*" not in rule[field], f"{role['metadata']['name']}: {rule}"


def test_agent_daemonset_runs_erdma_agent_with_the_config(case: tuple[str, Rendered]) -> None:
    _, out = case
    pod = out.get("DaemonSet", AGENT)["spec"]["template"]["spec"]
    container = out.container("DaemonSet", AGENT)
    assert pod["priorityClassName"] == "system-node-critical"
    assert container["args"] == ["agent", "--config", "/etc/erdma-agent/agent.yaml"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in (
        container["env"]
    )
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for path in ("/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources", "/dev"):
        assert path in mounts
    assert mounts["/sys"]["readOnly"] and mounts["/lib/modules"]["readOnly"]


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
    config = _agent_config(out, AGENT, tmp_path)
    assert config.dra.enabled and config.dra.devices == ["erdma_1"]
    assert config.dra.unhealthy == "taint"
    mounts = {m["mountPath"] for m in out.container("DaemonSet", AGENT)["volumeMounts"]}
    assert {"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins"} <= mounts
    assert "/var/run/cdi" in mounts  # per-claim CDI specs
    assert out.all("DeviceClass") and out.all("ResourceSlice") == []
    default = rendered["regular-auto-driver"]
    assert not _agent_config(default, AGENT, tmp_path).dra.enabled
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


# ---- a real API server ------------------------------------------------------------------------


def _sample_devices() -> list[dict[str, Any]]:
    labels = {"alibabacloud.com/instance-id": "i-bp1abc", "alibabacloud.com/nodename": "node-a"}
    device = {"instanceID": "i-bp1abc", "mac": "00:16:3e:2f:37:75", "id": "eni-bp1x",
              "networkCardIndex": 0, "queuePair": 0, "isPrimaryENI": False}  # fmt: skip
    good: dict[str, Any] = {
        "apiVersion": "network.alibabacloud.com/v1",
        "kind": "ERdmaDevice",
        "metadata": {"name": "node-a", "labels": labels},
        "spec": {"devices": [device], "jumboFrame": True},
    }
    primary = copy.deepcopy(good)
    primary["metadata"]["name"] = "node-b"
    primary["spec"]["devices"][0].update(isPrimaryENI=True, queuePair=8)
    return [good, primary]


async def _dry_run_apply(kubeconfig: Path, out: Rendered) -> None:
    client = AsyncClient(KubeConfig.from_file(kubeconfig))
    try:
        for crd in out.all("CustomResourceDefinition"):
            await client.apply(
                cast(CustomResourceDefinition, CustomResourceDefinition.from_dict(crd)),
                field_manager="helm-test",
                dry_run=True,
            )
        for obj in _sample_devices():
            await client.apply(
                ERdmaDeviceResource.from_dict(obj), field_manager="helm-test", dry_run=True
            )
        for configmap in out.all("ConfigMap"):
            await client.apply(
                cast(ConfigMap, ConfigMap.from_dict(configmap)),
                field_manager="helm-test",
                dry_run=True,
            )
        for secret in out.all("Secret"):
            await client.apply(
                cast(Secret, Secret.from_dict(secret)), field_manager="helm-test", dry_run=True
            )
        bad = _sample_devices()[0]
        bad["spec"]["devices"][0]["mac"] = "00-16-3E-2F-37-75"
        with pytest.raises(ApiError) as err:
            await client.apply(
                ERdmaDeviceResource.from_dict(bad), field_manager="helm-test", dry_run=True
            )
        assert "mac" in str(err.value.status.message)
    finally:
        await client.close()


def test_chart_crd_is_the_shipped_crd(rendered: dict[str, Rendered]) -> None:
    (crd,) = rendered["regular-auto-driver"].all("CustomResourceDefinition")
    assert crd == yaml.safe_load(CRD_MANIFEST.read_text())


def test_api_server_accepts_chart_objects_and_sample_devices(
    kube_api: KubeApiServer, rendered: dict[str, Rendered]
) -> None:
    """Server-side dry-run on a real API server (with the chart's CRD installed)."""
    for out in (rendered["regular-default-webhook-shared"], rendered["local-ofed"]):
        asyncio.run(_dry_run_apply(kube_api.kubeconfig, out))
