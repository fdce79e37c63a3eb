"""Helm values: names and overrides, bad values named by key, inconsistent combinations
explained, and a values file written for the reference chart still rendering."""

from __future__ import annotations

import json
from typing import Any

import helm_python
import pytest

from erdma.controller.config import parse_config
from tests.helm_support import ACCESS_KEY, merge, render

AGENT = "alibabacloud-erdma-agent"
CONTROLLER = "alibabacloud-erdma-controller"
DIGEST = "sha256:" + "0" * 64


def test_names_follow_overrides() -> None:
    out = render(merge(ACCESS_KEY, {"fullnameOverride": "rdma"}))
    assert out.find("DaemonSet", "rdma-agent") and out.find("Deployment", "rdma-controller")
    config = parse_config(json.loads(out.config_file("rdma-controller", "config.json")))
    assert config.controller_name == "rdma-controller"


# ---- bad values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"agent": {"preferDriver": "mlx"}}, ["/agent/preferDriver", "default", "compat", "ofed"]),
        (
            {"agent": {"exposedLocalERIs": ["i-* erdma_0", "erdma_1"]}},
            ["/agent/exposedLocalERIs/1"],
        ),
        ({"agent": {"slotsPerDevice": -1}}, ["/agent/slotsPerDevice", "minimum"]),
        ({"credentials": {"type": "ram_role_arn"}}, ["/credentials/type", "ram_role_sts"]),
        ({"agent": {"deviceListStrategy": "cdi"}}, ["/agent/deviceListStrategy"]),
        ({"webhookFailurePolicy": "Never"}, ["/webhookFailurePolicy", "Ignore", "Fail"]),
        ({"webhookTimeoutSeconds": 31}, ["/webhookTimeoutSeconds"]),
        ({"agent": {"preferedDriver": "ofed"}}, ["/agent", "preferedDriver"]),
        ({"agent": {"jumboFrameMTU": 9001}}, ["/agent/jumboFrameMTU", "maximum"]),
        (
            {"sharedRdma": {"selectors": {"vendors": ["mellanox"]}}},
            ["/sharedRdma/selectors/vendors/0"],
        ),
        ({"smcr": {"mode": "on"}}, ["/smcr/mode", "'off', 'webhook', 'prestart'"]),
        ({"smcr": {"mode": True}}, ["/smcr/mode", "'off', 'webhook', 'prestart'"]),
        ({"smcr": {"mdoe": "off"}}, ["/smcr", "mdoe"]),
        ({"agent": {"image": {"tag": DIGEST}}}, ["/agent/image/tag", "image.digest"]),
        (
            {"controller": {"image": {"tag": f"0.1.0@{DIGEST}"}}},
            ["/controller/image/tag", "image.digest"],
        ),
        ({"agent": {"image": {"digest": "sha256:abc"}}}, ["/agent/image/digest"]),
        ({"agent": {"tolerations": [{"opertor": "Exists"}]}}, ["/agent/tolerations/0", "opertor"]),
        (
            {"controller": {"tolerations": [{"operator": "Maybe"}]}},
            ["/controller/tolerations/0/operator", "Exists", "Equal"],
        ),
        ({"tolerations": "all"}, ["/tolerations"]),
        (
            {"controller": {"priorityClassName": "Cluster Critical"}},
            ["/controller/priorityClassName"],
        ),
        ({"credentials": {"existingSecret": "My_Secret"}}, ["/credentials/existingSecret"]),
        ({"agent": {"runtimeSocket": "/run/containerd"}}, ["/agent/runtimeSocket"]),
    ],
    ids=lambda v: json.dumps(v) if isinstance(v, dict) else None,
)
def test_bad_values_are_rejected_naming_the_key(
    values: dict[str, Any], expected: list[str]
) -> None:
    with pytest.raises(helm_python.HelmValuesError) as err:
        render(merge(ACCESS_KEY, values))
    for text in expected:
        assert text in str(err.value)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            {"credentials": {"type": ""}},
            [
                "credentials.existingSecret",
                "credentials.accessKeyID",
                "credentials.accessKeySecret",
            ],
        ),
        (
            {"credentials": {"type": "access_key", "accessKeyID": "ak"}},
            ["credentials.accessKeySecret"],
        ),
        (
            merge(ACCESS_KEY, {"config": {"localERIDiscovery": True, "enableWebhook": True}}),
            ["config.enableWebhook", "config.localERIDiscovery"],
        ),
        ({"credentials": {"type": "oidc_role_arn"}}, ["credentials.roleName"]),
        (
            merge(ACCESS_KEY, {"config": {"localERIDiscovery": True}, "smcr": {"mode": "webhook"}}),
            ["smcr.mode=webhook", "config.localERIDiscovery=true", "smcr.mode=prestart or off"],
        ),
        (
            merge(ACCESS_KEY, {"smcr": {"mode": "prestart"}, "agent": {"preferDriver": "ofed"}}),
            ["smcr.mode=prestart", "agent.preferDriver=ofed", "smcr.mode=off"],
        ),
        (
            merge(
                ACCESS_KEY,
                {
                    "config": {"enableWebhook": True, "enableInitContainerInject": True},
                    "smcr": {"mode": "prestart"},
                },
            ),
            ["config.enableInitContainerInject=true", "set smcr.mode=webhook"],
        ),
        (
            merge(
                ACCESS_KEY,
                {"smcr": {"mode": "webhook"}, "config": {"enableInitContainerInject": False}},
            ),
            ["smcr.mode=webhook", "config.enableInitContainerInject=false"],
        ),
        (
            merge(
                ACCESS_KEY,
                {
                    "smcr": {"mode": "prestart"},
                    "agent": {"runtimeSocket": "", "criSocketDir": "/var/run/docker"},
                },
            ),
            ["agent.runtimeSocket is empty", 'agent.criSocketDir "/var/run/docker"'],
        ),
        (
            merge(ACCESS_KEY, {"credentials": {"existingSecret": "erdma-ak"}}),
            ["credentials.existingSecret", "credentials.accessKeyID", "keep only"],
        ),
        (
            {"credentials": {"type": "oidc_role_arn", "roleName": "r", "existingSecret": "ak"}},
            ["credentials.existingSecret", "oidc_role_arn", "credentials.type=access_key"],
        ),
        (
            merge(
                ACCESS_KEY,
                {
                    "metrics": {"serviceMonitor": {"enabled": True}},
                    "agent": {"metrics": {"port": 0}},
                },
            ),
            ["agent.metrics.port"],
        ),
    ],
)
def test_inconsistent_values_fail_with_the_fix(values: dict[str, Any], expected: list[str]) -> None:
    with pytest.raises(helm_python.HelmRenderError) as err:
        render(values)
    for text in expected:
        assert text in str(err.value)


def test_ram_role_sts_outside_kube_system_is_refused_naming_the_namespace() -> None:
    with pytest.raises(helm_python.HelmRenderError) as err:
        render({"credentials": {"type": "ram_role_sts"}}, namespace="erdma-system")
    for text in ("ram_role_sts", "addon.network.token", "kube-system", '"erdma-system"'):
        assert text in str(err.value)


def test_a_bare_yaml_off_is_smcr_off() -> None:
    """`mode: off` unquoted is YAML false; it must not fail, nor turn SMC-R on."""
    for mode in (False, "off"):
        out = render(merge(ACCESS_KEY, {"smcr": {"mode": mode}}))
        agent = json.loads(out.config_file(AGENT, "agent.json"))
        assert agent["prestartContainer"] is False
        assert out.all("MutatingWebhookConfiguration") == []
