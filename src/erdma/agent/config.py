"""Agent settings: one typed model, filled from a file, then env, then flags.

Keys keep the names ACK users know from the Helm chart (`preferDriver`, `allocateAllDevices`,
`localERIDiscovery`, `exposedLocalERIs`). Every bad value is reported with its key, the value
and what would be accepted; nothing is half-applied because the whole model validates at once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails

from erdma import settings
from erdma.agent.config_file import ConfigError, load_file
from erdma.agent.exposure import parse_rules
from erdma.agent.installer_config import DriverInstallerConfig
from erdma.agent.nccl import NcclConfig
from erdma.agent.shared_config import SharedResourceConfig
from erdma.cdi import DeviceListStrategy
from erdma.dra.config import DraConfig
from erdma.settings import ChartValue

ENV_PREFIX = "ERDMA_"
FILE_ONLY: dict[str, Any] = {"flag": False}
# a device name or glob: name characters, `*`, `?` and balanced `[...]` classes
_DEVICE_GLOB = r"(?:[A-Za-z0-9_.*?-]|\[!?[A-Za-z0-9_.*?-]+\])+"
_INSTANCE = r"i-([A-Za-z0-9][A-Za-z0-9-]*|\*)"
EXPOSED_ERI_PATTERN = rf"^\s*{_INSTANCE}\s+{_DEVICE_GLOB}(/{_DEVICE_GLOB})*\s*$"


ResourceKind = Literal["aliyun/erdma", "shared"]


def _default_resources() -> list[ResourceKind]:
    return ["aliyun/erdma"]


class AgentConfig(BaseModel):
    """Everything `erdma agent` needs: the one declaration of each setting (see erdma.settings
    for what is derived from it: flags, environment names, docs/configuration.md, the chart's
    schema)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    version: Literal["v1"] = Field(
        "v1", description="format of this file; absent means v1", json_schema_extra=FILE_ONLY
    )
    node_name: str = Field(
        "",
        alias="nodeName",
        description="this node's name (Events, Regular mode)",
        json_schema_extra={"env": ["NODE_NAME"], "default_text": "`$NODE_NAME`"},
    )
    host_root: Path = Field(
        Path("/"), alias="hostRoot", description="where the host's `/sys`, `/dev`, `/proc` are"
    )
    kubelet_dir: Annotated[Path, ChartValue("agent.kubeletDir")] = Field(
        Path("/var/lib/kubelet"),
        alias="kubeletDir",
        description="kubelet root (a custom `--root-dir` is supported)",
        json_schema_extra={"pattern": "^/.*[^/]$"},
    )
    prefer_driver: Annotated[
        Literal["", "default", "compat", "ofed"],
        ChartValue(
            "agent.preferDriver",
            description="erdma driver mode: default, compat or ofed; empty: ofed on GPU nodes, "
            "else default",
        ),
    ] = Field(
        "", alias="preferDriver", description="erdma driver mode; empty: chosen automatically"
    )
    allocate_all_devices: Annotated[bool, ChartValue("agent.allocateAllDevices")] = Field(
        False, alias="allocateAllDevices", description="give every exposed device to each container"
    )
    local_eri_discovery: Annotated[
        bool,
        ChartValue(
            "config.localERIDiscovery",
            description="Local mode: no controller, the agent exposes local devices (see "
            "agent.exposedLocalERIs). Regular mode (false) brings up the ERI netdevs: "
            "the agent gets hostNetwork and NET_ADMIN.",
        ),
    ] = Field(
        False,
        alias="localERIDiscovery",
        description="Local mode: expose local devices, no controller",
    )
    exposed_local_eris: Annotated[
        list[str],
        ChartValue(
            "agent.exposedLocalERIs",
            description='Local mode device selection, entries "<instance-id|i-*> '
            '<device>[/<device>...]" (globs allowed, e.g. "i-* erdma_*"); empty '
            "exposes every device",
        ),
    ] = Field(
        default_factory=list,
        alias="exposedLocalERIs",
        description="Local mode selection: `<instance-id|i-*> <device>[/<device>...]` entries",
        json_schema_extra={"items": {"type": "string", "pattern": EXPOSED_ERI_PATTERN}},
    )
    instance_id: str = Field(
        "",
        alias="instanceID",
        description="instance id for Local mode matching; empty: read from instance metadata "
        "when an entry names an instance",
    )
    slots_per_device: Annotated[int, ChartValue("agent.slotsPerDevice")] = Field(
        200, alias="slotsPerDevice", ge=1, le=10000, description="slots per eRDMA device"
    )
    prestart_container: bool = Field(
        False, alias="prestartContainer", description="configure SMC-R in PreStartContainer"
    )
    device_list_strategy: Annotated[
        DeviceListStrategy,
        ChartValue(
            "agent.deviceListStrategy",
            description="how Allocate hands devices to the runtime: device-specs, cdi-cdi-devices, "
            "cdi-annotations (the CDI ones mount the host's /var/run/cdi)",
        ),
    ] = Field(
        DeviceListStrategy.DEVICE_SPECS,
        alias="deviceListStrategy",
        description="how Allocate hands devices to the runtime: device specs or CDI names",
    )
    cdi_spec_dir: Path = Field(
        Path("/var/run/cdi"), alias="cdiSpecDir", description="where CDI strategies keep the spec"
    )
    rescan_interval: float = Field(
        0.5, alias="rescanInterval", gt=0, le=60, description="seconds between host rescans"
    )
    metrics_port: Annotated[
        int,
        ChartValue(
            "agent.metrics.port",
            description="Prometheus port on the node (the agent uses the host network), also "
            "serving /healthz and /readyz for the probes; 0 turns metrics and probes "
            "off",
        ),
        ChartValue(
            "sharedRdma.metrics.port",
            description="Prometheus port on the node of ack-rdma-dp-ds; differs from "
            "agent.metrics.port so both can run on a node",
            default=9710,
        ),
    ] = Field(
        9709, alias="metricsPort", ge=0, le=65535, description="Prometheus `/metrics` port (0: off)"
    )
    watch_mode: Literal["auto", "inotify", "poll"] = Field(
        "auto", alias="watchMode", description="how the kubelet directory is watched"
    )
    host_namespace: Annotated[
        bool,
        ChartValue(
            "agent.hostNamespace",
            description="the driver DaemonSet's init container runs its host commands (modprobe) "
            "in the host's mount namespace through nsenter into PID 1: hostPID and "
            "SYS_ADMIN, SYS_CHROOT, SYS_PTRACE for that pod; leave off unless the "
            "image's kmod cannot load the host's modules. The driverInstaller always "
            "does so. The agent itself never runs in the host's namespaces.",
        ),
    ] = Field(
        False,
        alias="hostNamespace",
        description="run host commands via `nsenter -t 1 -m --` (containerised agent)",
    )
    prepare_node: Annotated[
        bool,
        ChartValue(
            "agent.prepareNode",
            description="prepare each node once per boot in the driver DaemonSet "
            "(`<fullname>-driver`): install a missing driver, load erdma in the chosen "
            "mode and smc. Its init container holds SYS_MODULE and a read-only "
            "/lib/modules and exits when done; off for node images that prepare the "
            "driver themselves (no driver DaemonSet then).",
        ),
    ] = Field(
        True,
        alias="prepareNode",
        description="load erdma in the chosen mode and keep the host SMC pnet table",
    )
    runtime_socket: Annotated[
        str,
        ChartValue(
            "agent.runtimeSocket",
            description="the container runtime's CRI socket, the one host file mounted for "
            "smcr.mode=prestart (e.g. /run/k3s/containerd/containerd.sock, "
            "/var/run/crio/crio.sock)",
            default="/run/containerd/containerd.sock",
        ),
    ] = Field(
        "",
        alias="runtimeSocket",
        description="CRI socket for SMC-R in PreStartContainer; empty: the first existing "
        "containerd socket",
        pattern=r"^$|^/.*\.sock$",
        json_schema_extra={"env": ["RUNTIME_SOCK"]},
    )
    metadata_url: str = Field(
        "http://100.100.100.200",
        alias="metadataURL",
        description="ECS instance metadata (Regular mode netdevs, Local mode instance id)",
    )
    jumbo_frame_mtu: Annotated[int, ChartValue("agent.jumboFrameMTU")] = Field(
        8500, alias="jumboFrameMTU", ge=1280, le=9000, description="MTU of jumbo-frame ERIs"
    )
    kubeconfig: str = Field(
        "",
        description="kubeconfig for API access; empty: in-cluster",
        json_schema_extra={"default_text": "in-cluster"},
    )
    smcr_disable_ipv6: bool = Field(
        True,
        alias="smcrDisableIPv6",
        description="SMC-R: `net.ipv6.conf.all.disable_ipv6=1` in the pod netns",
    )
    driver_installer: DriverInstallerConfig = Field(
        default_factory=DriverInstallerConfig,
        alias="driverInstaller",
        description="install a missing driver: `enabled`, `version`, `mirror`, "
        "`installerSha256`, `envSetupSha256`, `timeoutSeconds`",
    )
    driver_install_command: Annotated[
        str,
        ChartValue(
            "agent.driverInstallCommand",
            description="command that replaces the driverInstaller's download and install. It is "
            "stored in the ConfigMap and the release's values: a command carrying a "
            "token belongs in a Secret instead (agent.driverInstallCommandSecret).",
        ),
    ] = Field(
        "",
        alias="driverInstallCommand",
        description="replaces the driverInstaller's download and install (file only: it may "
        "carry a token)",
        json_schema_extra={"flag": False, "env": ["ERDMA_DRIVER_INSTALL_COMMAND"], "secret": True},
    )
    nccl: NcclConfig = Field(
        default_factory=NcclConfig,
        description="NCCL env for GPU pods: `enabled`, `socketIfname`, `gidIndex`, `overrides`",
    )
    log_level: Annotated[
        Literal["debug", "info", "warning", "error"], ChartValue("agent.logLevel")
    ] = Field("info", alias="logLevel", description="level of the JSON log lines on stderr")
    resources: list[ResourceKind] = Field(
        default_factory=_default_resources, description="which plugins to serve"
    )
    shared_resources: list[SharedResourceConfig] = Field(
        default_factory=lambda: [SharedResourceConfig()],
        alias="sharedResources",
        description="shared resources such as `rdma/hca` (docs/shared-rdma.md)",
        json_schema_extra={"default_text": "one `rdma/hca`"},
    )
    non_host_network_rdma: Annotated[
        bool,
        ChartValue(
            "sharedRdma.nonHostNetworkRdma",
            description="allow rdma/hca for non-hostNetwork pods (needs an IPv6 compute network, "
            "which ack-rdma-dp-ds reads from the host network namespace: it then runs "
            "with hostNetwork)",
        ),
    ] = Field(
        False, alias="nonHostNetworkRdma", description="allow `rdma/hca` for non-hostNetwork pods"
    )
    dra: DraConfig = Field(
        default_factory=DraConfig,
        description="the DRA driver: `enabled`, `devices`, `unhealthy`, ... (docs/dra.md)",
    )

    @field_validator("kubelet_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise ValueError("must be an absolute path such as /var/lib/kubelet")
        return value

    @field_validator("resources", mode="before")
    @classmethod
    def _split_resources(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @property
    def allocates_all(self) -> bool:
        """Whether each container gets every exposed device whatever it asks for.

        Local mode with an ``exposedLocalERIs`` selection does so as the reference does (its
        NCCL example relies on both NICs showing up with ``aliyun/erdma: 1``); with the
        selection empty, Local mode allocates by NUMA like Regular mode.
        """
        return self.allocate_all_devices or (
            self.local_eri_discovery and bool(self.exposed_local_eris)
        )

    @field_validator("exposed_local_eris", mode="before")
    @classmethod
    def _split_joined(cls, value: object) -> object:
        """Accept the reference's comma-joined flag form as well as a list."""
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("exposed_local_eris")
    @classmethod
    def _rules(cls, values: list[str]) -> list[str]:
        parse_rules(values)  # an unbalanced glob such as 'i-* erdma_[0' is refused here
        return values

    def loggable(self) -> dict[str, Any]:
        """The settings as JSON for the start-up log line, without credentials."""
        return settings.redacted(self)


def _explain(errors: list[ErrorDetails], flags: bool = True) -> str:
    return "invalid agent configuration: " + settings.explain(AgentConfig, errors, flags)


def env_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """`ERDMA_PREFER_DRIVER=ofed` -> {"prefer_driver": "ofed"}; NODE_NAME, RUNTIME_SOCK too.

    A setting's own ``ERDMA_`` name wins over its compatibility name."""
    values: dict[str, Any] = {}
    for name, info in AgentConfig.model_fields.items():
        for env in settings.env_names(ENV_PREFIX, name, info):
            if environ.get(env) and name not in values:
                values[name] = environ[env]
    return values


def build_config(
    file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> AgentConfig:
    """file < env < flags; flags whose value is None were not given and do not override.

    A file's values are typed (YAML/JSON), so they are checked strictly: `slotsPerDevice: true`
    or `metricsPort: "9000"` is refused, not coerced. Env and flags are strings by nature and
    are parsed."""
    merged: dict[str, Any] = {}
    if file is not None:
        from_file = {_field_name(key): value for key, value in load_file(file).items()}
        overridden = set(env_values(os.environ if environ is None else environ))
        overridden |= {k for k, v in (flags or {}).items() if v is not None}
        _check_file_types(file, {k: v for k, v in from_file.items() if k not in overridden})
        merged.update(from_file)
    merged.update(env_values(os.environ if environ is None else environ))
    merged.update({k: v for k, v in (flags or {}).items() if v is not None})
    try:
        return AgentConfig.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_explain(exc.errors())) from None


def _check_file_types(file: Path, values: dict[str, Any]) -> None:
    """Refuse a file value of the wrong JSON type (a bool for a number, a string for a bool);
    other problems are reported by the full validation, with what overrides them."""
    try:
        text = json.dumps(values, default=str)
        AgentConfig.__pydantic_validator__.validate_json(text, strict=True)
    except ValidationError as exc:
        wrong = [e for e in exc.errors() if e["type"].endswith("_type")]
        if wrong:
            raise ConfigError(f"config file {file}: {_explain(wrong, flags=False)}") from None


def _field_name(key: str) -> str:
    """Map a file key (camelCase alias or snake_case) to the field name; unknown keys pass."""
    for name, info in AgentConfig.model_fields.items():
        if key in (name, info.alias):
            return name
    return key
