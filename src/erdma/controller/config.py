"""Controller settings: the chart's ``config.json``, validated with clear errors.

The keys are those of the reference controller's ConfigMap, so an existing Helm values file keeps
working; keys the reference ignored (``localERIDiscovery``, the webhook ones) are accepted and
kept. Additions are ours and default to the behaviour most users want. An unknown key is an
error, because a misspelt key silently falling back to a default is worse than a failed start.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from erdma.settings import ChartValue

DEFAULT_CONFIG_PATH = "/etc/erdma-controller/config.json"


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the key, the value and the fix."""


class ControllerConfig(BaseModel):
    """``config.json`` of ``erdma controller``; field aliases are the JSON keys."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    # Keys of the reference controller.
    region: Annotated[str, ChartValue("config.region")] = Field(
        "",
        pattern=r"^$|^[a-z]{2}-[a-z0-9-]+$",
        description="ECS region id such as cn-hangzhou; empty: read it from instance metadata",
    )
    manage_non_owned_enis: Annotated[bool, ChartValue("config.manageNonOwnedENIs")] = Field(
        True,
        alias="manageNonOwnedENIs",
        description="adopt any HighPerformance ENI already on a card; false: only ERIs this "
        "controller created",
    )
    node_selector: Annotated[
        dict[str, str],
        ChartValue(
            "nodeSelector",
            description="agent placement; also copied into the controller's config: only Nodes "
            "with these labels get ERIs",
        ),
    ] = Field(
        default_factory=dict,
        alias="nodeSelector",
        json_schema_extra={"chart": {"definition": "labelMap"}},
        description="exact label match for managed Nodes",
    )
    wait_node_ready_timeout_seconds: Annotated[
        int,
        ChartValue(
            "controller.waitNodeReadyTimeoutSeconds",
            description="how long a new Node may stay NotReady before its ERIs are planned anyway",
        ),
    ] = Field(
        300,
        ge=0,
        le=86400,
        alias="waitNodeReadyTimeoutSeconds",
        description="how long to wait for a NotReady Node",
    )
    controller_namespace: str = Field(
        "kube-system",
        alias="controllerNamespace",
        description="where the leader-election Lease and the webhook Secret live",
    )
    controller_name: str = Field(
        "alibabacloud-erdma-controller",
        alias="controllerName",
        description="name of the webhook Service, Secret and configurations",
    )
    cluster_domain: str = Field(
        "cluster.local",
        alias="clusterDomain",
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="cluster DNS domain, for the webhook certificate's names",
    )
    cert_dir: str = Field(
        "/var/lib/certDir",
        alias="certDir",
        description="where the webhook certificate files are written",
    )
    enable_device_plugin: bool = Field(
        True,
        alias="enableDevicePlugin",
        description="the agent serves aliyun/erdma (the SMC-R injection needs it)",
    )
    enable_webhook: bool = Field(
        False, alias="enableWebhook", description="serve the admission webhooks"
    )
    enable_init_container_inject: bool = Field(
        True,
        alias="enableInitContainerInject",
        description="SMC-R path 2: inject the smcr-init container into annotated pods",
    )
    smc_init_image: Annotated[
        str,
        ChartValue(
            "config.smcInitImage",
            description="image of the injected smcr-init container; empty: the agent image (it "
            "holds `erdma smcr-init`)",
        ),
    ] = Field("", alias="smcInitImage", description="image of the injected smcr-init container")
    webhook_port: Annotated[int, ChartValue("controller.webhookPort")] = Field(
        9443,
        alias="webhookPort",
        ge=1,
        le=65535,
        description="HTTPS port of the admission webhooks (with enableWebhook)",
    )
    non_host_network_rdma: Annotated[
        bool, ChartValue("sharedRdma.nonHostNetworkRdma", owner=False)
    ] = Field(
        False,
        alias="nonHostNetworkRdma",
        description="let non-hostNetwork pods request the shared resources",
    )
    shared_resource_names: list[str] = Field(
        default_factory=lambda: ["rdma/hca"],
        alias="sharedResourceNames",
        description="resources the hostNetwork rule guards",
    )
    local_eri_discovery: Annotated[bool, ChartValue("config.localERIDiscovery", owner=False)] = (
        Field(
            False,
            alias="localERIDiscovery",
            description="Local mode; accepted for compatibility (the controller is not installed "
            "then)",
        )
    )

    # Ours.
    cleanup_on_node_delete: Annotated[bool, ChartValue("controller.cleanupOnNodeDelete")] = Field(
        True,
        alias="cleanupOnNodeDelete",
        description="delete our ERIs once their Node is gone and ECS says the instance is "
        "released (or they were never attached); false: never",
    )
    cleanup_running_instances: Annotated[bool, ChartValue("controller.cleanupRunningInstances")] = (
        Field(
            False,
            alias="cleanupRunningInstances",
            description="with cleanupOnNodeDelete, also detach and delete our ERIs of a deleted "
            "Node "
            "whose instance still runs (for clusters whose deleted Nodes never come back)",
        )
    )
    pending_requeue_seconds: float = Field(
        10.0,
        gt=0,
        alias="pendingRequeueSeconds",
        description="longest recheck interval while ERIs attach: the first recheck comes "
        "0.25-0.5 s after the pass that left them attaching, each further one 1.5 times as late",
    )
    node_not_ready_requeue_seconds: float = Field(
        30.0,
        gt=0,
        alias="nodeNotReadyRequeueSeconds",
        description="recheck interval while the Node is NotReady",
    )
    reverify_interval_seconds: float = Field(
        300.0, gt=0, alias="reverifyIntervalSeconds", description="recheck interval for Ready Nodes"
    )
    reconcile_workers: Annotated[int, ChartValue("controller.reconcileWorkers")] = Field(
        64,
        ge=1,
        le=256,
        alias="reconcileWorkers",
        description="Nodes reconciled at once; concurrent passes share their ECS look-ups, and "
        "the client's rate limit still bounds the calls",
    )
    error_requeue_seconds: float = Field(
        30.0,
        gt=0,
        alias="errorRequeueSeconds",
        description="retry interval after a failure; also the longest wait between retries "
        "while the Kubernetes API server is unavailable (0.5-1 s, then twice as long each time)",
    )
    lease_name: str = Field(
        "26dc1c71.alibabacloud.com",
        min_length=1,
        alias="leaseName",
        description="leader-election Lease",
    )
    lease_duration_seconds: float = Field(
        15.0,
        ge=2,
        alias="leaseDurationSeconds",
        description="time until a crashed leader is replaced",
    )
    health_port: Annotated[
        int,
        ChartValue(
            "controller.healthPort",
            description="port of /healthz and /readyz (probes) and of the Prometheus metrics at "
            "/metrics; 0 turns them off",
        ),
    ] = Field(
        8081,
        ge=0,
        le=65535,
        alias="healthPort",
        description="/healthz, /readyz and the Prometheus /metrics; 0 turns them off",
    )
    ecs_endpoint: str = Field(
        "",
        alias="ecsEndpoint",
        description="ECS endpoint override (host[:port]); empty: the region's VPC endpoint, "
        "or the public one with env PUBLIC_NETWORK=true",
    )
    ecs_protocol: Literal["HTTPS", "HTTP"] = Field(
        "HTTPS", alias="ecsProtocol", description="protocol of ECS calls"
    )
    ecs_rate_limit: float = Field(
        10.0,
        gt=0,
        alias="ecsRateLimit",
        description="ECS calls per second for the whole controller",
    )
    ecs_burst: float = Field(
        10.0, ge=1, alias="ecsBurst", description="calls allowed at once after idle time"
    )
    ecs_timeout_seconds: float = Field(
        10.0, gt=0, alias="ecsTimeoutSeconds", description="per-call connect/read timeout"
    )
    webhook_cert_check_seconds: Annotated[
        float, ChartValue("controller.webhookCertCheckSeconds")
    ] = Field(
        43200.0,
        gt=0,
        alias="webhookCertCheckSeconds",
        json_schema_extra={"chart": {"type": "integer", "minimum": 60, "maximum": 2592000}},
        description="how often a running replica checks whether the webhook certificate is "
        "due for rotation",
    )

    @field_validator("node_selector")
    @classmethod
    def _selector_not_blank(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key.strip():
                raise ValueError("label keys must not be empty")
        return value

    def owns(self, labels: dict[str, str] | None) -> bool:
        """Whether a Node with these labels is managed: every selector pair must match exactly."""
        have = labels or {}
        return all(have.get(k) == v for k, v in self.node_selector.items())


def parse_config(data: Any, source: str = "config") -> ControllerConfig:
    """Validate already-decoded JSON; ``source`` names the file in error messages."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a JSON object, got {type(data).__name__}")
    try:
        return ControllerConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, data, source)) from None


def load_config(path: str | Path) -> ControllerConfig:
    """Read and validate ``config.json``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read the controller config: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text (byte offset {exc.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except RecursionError:
        raise ConfigError(f"{p}: not valid JSON: nested too deeply") from None
    return parse_config(data, str(p))


def _describe(exc: ValidationError, data: dict[str, Any], source: str) -> str:
    """One line per problem: ``key 'x': value 'y' is invalid: <pydantic's reason>``."""
    accepted = sorted(f.alias or n for n, f in ControllerConfig.model_fields.items())
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        top = str(err["loc"][0]) if err["loc"] else ""
        if err["type"] == "extra_forbidden":
            lines.append(f"unknown key {key!r}; accepted keys: {', '.join(accepted)}")
            continue
        value = err.get("input", data.get(top))
        lines.append(f"key {key!r}: value {value!r} is invalid: {err['msg']}")
    return f"{source}: " + "; ".join(lines)
