"""The Helm chart: what each values set installs, that the programs accept what it configures,
that Kubernetes accepts every object, and that bad values stop `helm install` naming the key."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any, cast

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import ConfigMap, Secret

from erdma.controller.config import parse_config
from erdma.controller.providers.ecs.credentials import CredentialSettings
from erdma.kube.client import ERdmaDeviceResource
from tests.fakes.kubeapi import CRD_MANIFEST, KubeApiServer
from tests.helm_support import (
    KUBE_VERSION,
    Rendered,
    chart_defaults,
    lint_findings,
    merge,
)
from tests.integration.helm_cases import (
    AGENT,
    CASES,
    CONTROLLER,
    DRIVER,
    SHARED,
    agent_config,
    driver_config,
)

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_helm"]


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
    config = agent_config(out, AGENT, tmp_path)
    agent = merge(chart_defaults()["agent"], values.get("agent", {}))
    seen = config.model_dump(mode="json", by_alias=True)
    assert seen["nodeName"] == "node-a"
    assert seen["resources"] == ["aliyun/erdma"]
    assert seen["localERIDiscovery"] == values.get("config", {}).get("localERIDiscovery", False)
    for key in (
        "preferDriver",
        "allocateAllDevices",
        "exposedLocalERIs",
        "slotsPerDevice",
        "deviceListStrategy",
        "jumboFrameMTU",
        "runtimeSocket",
    ):
        assert seen[key] == agent[key], key
    # node preparation is the driver DaemonSet's: the agent never runs in the host's namespaces
    assert seen["prepareNode"] is False and seen["hostNamespace"] is False
    assert seen["driverInstallCommand"] == ""
    for key in ("enabled", "socketIfname", "gidIndex", "overrides"):
        assert seen["nccl"][key] == agent["nccl"][key], f"nccl.{key}"
    assert seen["metricsPort"] == agent["metrics"]["port"]


def test_driver_config_prepares_the_node_as_the_values_say(
    case: tuple[str, Rendered], tmp_path: Path
) -> None:
    name, out = case
    values, _ = CASES[name]
    agent = merge(chart_defaults()["agent"], values.get("agent", {}))
    if not agent["prepareNode"]:
        assert out.find("DaemonSet", DRIVER) is None
        return
    seen = driver_config(out, tmp_path).model_dump(mode="json", by_alias=True)
    assert seen["prepareNode"] is True
    for key in ("preferDriver", "driverInstallCommand"):
        assert seen[key] == agent[key], key
    assert seen["driverInstaller"] == agent["driverInstaller"]
    installs = agent["driverInstaller"]["enabled"]
    assert seen["hostNamespace"] == (agent["hostNamespace"] or installs)  # the installer needs it


def test_shared_config_is_accepted_by_the_agent(case: tuple[str, Rendered], tmp_path: Path) -> None:
    name, out = case
    values, _ = CASES[name]
    shared = values.get("sharedRdma", {})
    if not shared.get("enabled"):
        assert out.find("DaemonSet", SHARED) is None
        assert out.find("ConfigMap", SHARED) is None
        return
    config = agent_config(out, SHARED, tmp_path)
    assert config.model_dump(mode="json")["resources"] == ["shared"]
    assert config.prepare_node is False  # the shared DaemonSet never loads erdma
    (resource,) = config.shared_resources
    assert resource.name == "rdma/hca"
    assert resource.capacity == shared.get("capacity", 1000)
    assert config.non_host_network_rdma == shared.get("nonHostNetworkRdma", False)
    for key, wanted in shared.get("selectors", {}).items():
        assert resource.selectors.model_dump(by_alias=True)[key] == wanted
    assert config.metrics_port != agent_config(out, AGENT, tmp_path).metrics_port


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
    mutating = bool(out.all("MutatingWebhookConfiguration"))
    assert config.enable_webhook == (mutating or bool(out.all("ValidatingWebhookConfiguration")))
    assert config.enable_init_container_inject == mutating
    assert mutating == (smcr_mode(values) == "webhook")
    assert config.smc_init_image == out.container("DaemonSet", AGENT)["image"]
    credentials = values["credentials"]
    settings = CredentialSettings.from_mapping(
        out.secret_json(f"{CONTROLLER}-credential", "credential.json")
    )
    assert settings.type == credentials["type"]
    assert settings.access_key_id == credentials.get("accessKeyID", "")


def smcr_mode(values: dict[str, Any]) -> str:
    """The SMC-R path values choose: smcr.mode, where "auto" (the default) is the webhook in
    Regular mode unless the ofed driver mode has no SMC-R to turn on."""
    mode = values.get("smcr", {}).get("mode", "auto")
    if mode != "auto":
        return str(mode)
    local = values.get("config", {}).get("localERIDiscovery", False)
    ofed = values.get("agent", {}).get("preferDriver") == "ofed"
    return "off" if local or ofed else "webhook"


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
    assert container["args"] == ["agent", "--config", "/etc/erdma-agent/agent.json"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in (
        container["env"]
    )
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for path in ("/var/lib/kubelet/device-plugins", "/dev"):
        assert path in mounts
    assert mounts["/sys"]["readOnly"] and "/lib/modules" not in mounts


def test_driver_daemonset_prepares_then_watches(case: tuple[str, Rendered]) -> None:
    """The one-time unit: `erdma driver prepare` as the init container with the node's module
    tree read-only and the install lock; `erdma driver watch` reading what it prepared."""
    _, out = case
    if out.find("DaemonSet", DRIVER) is None:
        return
    pod = out.get("DaemonSet", DRIVER)["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["args"] == ["driver", "prepare", "--config", "/etc/erdma-driver/driver.json"]
    assert init["image"] == out.container("DaemonSet", AGENT)["image"]
    mounts = {m["mountPath"]: m for m in init["volumeMounts"]}
    assert mounts["/lib/modules"]["readOnly"] and "/run/erdma" in mounts
    (watch,) = pod["containers"]
    assert watch["args"] == ["driver", "watch"]
    (state,) = watch["volumeMounts"]
    assert state["readOnly"] and state["mountPath"] == mounts["/run/erdma-driver"]["mountPath"]


# ---- a real API server ------------------------------------------------------------------------


def _sample_devices() -> list[dict[str, Any]]:
    labels = {"alibabacloud.com/instance-id": "i-bp1abc", "alibabacloud.com/nodename": "node-a"}
    device = {
        "instanceID": "i-bp1abc",
        "mac": "00:16:3e:2f:37:75",
        "id": "eni-bp1x",
        "networkCardIndex": 0,
        "queuePair": 0,
        "isPrimaryENI": False,
    }
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
