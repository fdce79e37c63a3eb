"""The chart values sets the Helm tests render, and what the agent makes of a rendered
ConfigMap (the fixtures that render them are in conftest_helm)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from erdma.agent.config import AgentConfig, build_config
from tests.helm_support import (
    ACCESS_KEY,
    Rendered,
    merge,
)

AGENT = "alibabacloud-erdma-agent"
DRIVER = "alibabacloud-erdma-driver"
CONTROLLER = "alibabacloud-erdma-controller"
SHARED = "ack-rdma-dp-ds"

#: the environment the agent's pod gives it, on the node the chart tests place it on
NODE_A = {"NODE_NAME": "node-a"}

#: id -> (values, release namespace); covers both modes, every driver, every SMC-R path, shared
#: on/off and every credential type.
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "regular-auto-driver": (
        merge(
            ACCESS_KEY,
            {
                "agent": {"runtimeSocket": "/run/k3s/containerd/containerd.sock"},
                "smcr": {"mode": "prestart"},
            },
        ),
        "kube-system",
    ),
    "regular-default-webhook-shared": (
        merge(
            ACCESS_KEY,
            {
                "agent": {"preferDriver": "default", "slotsPerDevice": 50, "jumboFrameMTU": 9000},
                "config": {"region": "cn-hangzhou"},
                "smcr": {"mode": "webhook"},
                # the rdma/hca rule as the controller's webhook, not the admission policy
                "sharedRdma": {"enabled": True, "capacity": 500, "admissionPolicy": False},
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
    "regular-sts-digest": (
        {
            "credentials": {"type": "ram_role_sts"},
            "agent": {"image": {"digest": "sha256:" + "0123456789abcdef" * 4}},
        },
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


def agent_config(out: Rendered, daemonset: str, tmp_path: Path) -> AgentConfig:
    """What the DaemonSet's `erdma agent --config` makes of its ConfigMap file, on node-a."""
    return build_config(mounted_agent_config(out, daemonset, tmp_path), environ=NODE_A)


def mounted_agent_config(
    out: Rendered, daemonset: str, tmp_path: Path, name: str | None = None
) -> Path:
    """The DaemonSet's config file (``name``, or its `--config` one) as the pod would see it."""
    file_name, text = out.agent_config_file(daemonset, name)
    path = tmp_path / daemonset / file_name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def driver_config(out: Rendered, tmp_path: Path) -> AgentConfig:
    """What the driver DaemonSet's `erdma driver prepare --config` makes of its file, on node-a."""
    (init,) = out.get("DaemonSet", DRIVER)["spec"]["template"]["spec"]["initContainers"]
    args = [str(a) for a in init["args"]]
    name = Path(args[args.index("--config") + 1]).name
    path = tmp_path / DRIVER / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(out.config_file(AGENT, name))
    return build_config(path, environ=NODE_A)
