"""Agent settings: one typed model, filled from a file, then env, then flags.

Keys keep the names ACK users know from the Helm chart (`preferDriver`, `allocateAllDevices`,
`localERIDiscovery`, `exposedLocalERIs`). Every bad value is reported with its key, the value
and what would be accepted; nothing is half-applied because the whole model validates at once.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from erdma.cdi import DeviceListStrategy

ENV_PREFIX = "ERDMA_"


CharKind = Literal["uverbs", "rdma_cm", "umad", "issm"]
ResourceKind = Literal["aliyun/erdma", "shared"]


def _default_chars() -> list[CharKind]:
    return ["uverbs", "rdma_cm"]


def _default_resources() -> list[ResourceKind]:
    return ["aliyun/erdma"]


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message says which and why."""


class NcclConfig(BaseModel):
    """NCCL env for GPU pods in compat/ofed mode; see erdma.agent.nccl.

    `overrides` replace computed values; an empty value removes that variable.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

    enabled: bool = True
    socket_ifname: str = Field(
        "", alias="socketIfname", pattern=r"^(\^?=?[\w.:@-]+(,[\w.:@-]+)*)?$"
    )
    gid_index: int | None = Field(None, alias="gidIndex", ge=-1, le=255)
    overrides: dict[str, str] = Field(default_factory=dict)

    @field_validator("overrides")
    @classmethod
    def _env_names(cls, values: dict[str, str]) -> dict[str, str]:
        for key in values:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise ValueError(
                    f"key {key!r} is not an environment variable name; use letters, digits "
                    "and underscores, not starting with a digit"
                )
        return values


class SharedSelectors(BaseModel):
    """Which RDMA devices form a shared resource; every non-empty list must match (AND).

    The default selects Mellanox `mlx5_core` HCAs, what Lingjun nodes carry.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    ibdev_names: list[str] = Field(default_factory=list, alias="ibdevNames")  # globs
    drivers: list[str] = Field(default_factory=lambda: ["mlx5_core"])
    vendors: list[str] = Field(default_factory=list)  # PCI vendor ids, e.g. "15b3"
    device_ids: list[str] = Field(default_factory=list, alias="deviceIDs")
    netdev_names: list[str] = Field(default_factory=list, alias="netdevNames")  # globs

    @field_validator("ibdev_names", "netdev_names")
    @classmethod
    def _globs(cls, values: list[str]) -> list[str]:
        for value in values:
            if not value or value.count("[") != value.count("]"):
                raise ValueError(
                    f"{value!r} is not a valid glob: use names with *, ? and balanced [...]"
                )
        return values

    @field_validator("vendors", "device_ids")
    @classmethod
    def _pci_ids(cls, values: list[str]) -> list[str]:
        for value in values:
            digits = value.lower().removeprefix("0x")
            if not (1 <= len(digits) <= 4) or any(c not in "0123456789abcdef" for c in digits):
                raise ValueError(f"{value!r} is not a PCI id: use 4 hex digits such as '15b3'")
        return values


class SharedResourceConfig(BaseModel):
    """One shared resource such as `rdma/hca: 1k` (every pod gets every selected HCA)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(
        "rdma/hca", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9][-A-Za-z0-9_.]*$"
    )
    capacity: int = Field(1000, ge=1, le=100000)
    selectors: SharedSelectors = Field(default_factory=SharedSelectors)
    required_char_devices: list[CharKind] = Field(
        default_factory=_default_chars, alias="requiredCharDevices"
    )


class AgentConfig(BaseModel):
    """Everything `erdma agent` needs; see the README's configuration reference."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    node_name: str = Field("", alias="nodeName")
    host_root: Path = Field(Path("/"), alias="hostRoot")
    kubelet_dir: Path = Field(Path("/var/lib/kubelet"), alias="kubeletDir")
    prefer_driver: Literal["", "default", "compat", "ofed"] = Field("", alias="preferDriver")
    allocate_all_devices: bool = Field(False, alias="allocateAllDevices")
    local_eri_discovery: bool = Field(False, alias="localERIDiscovery")
    exposed_local_eris: list[str] = Field(default_factory=list, alias="exposedLocalERIs")
    instance_id: str = Field("", alias="instanceID")
    slots_per_device: int = Field(200, alias="slotsPerDevice", ge=1, le=10000)
    prestart_container: bool = Field(False, alias="prestartContainer")
    device_list_strategy: DeviceListStrategy = Field(
        DeviceListStrategy.DEVICE_SPECS, alias="deviceListStrategy"
    )
    cdi_spec_dir: Path = Field(Path("/var/run/cdi"), alias="cdiSpecDir")
    rescan_interval: float = Field(0.5, alias="rescanInterval", gt=0, le=60)
    metrics_port: int = Field(9709, alias="metricsPort", ge=0, le=65535)
    watch_mode: Literal["auto", "inotify", "poll"] = Field("auto", alias="watchMode")
    host_namespace: bool = Field(False, alias="hostNamespace")
    prepare_node: bool = Field(True, alias="prepareNode")
    runtime_socket: str = Field("", alias="runtimeSocket")
    metadata_url: str = Field("http://100.100.100.200", alias="metadataURL")
    jumbo_frame_mtu: int = Field(8500, alias="jumboFrameMTU", ge=1280, le=9000)
    kubeconfig: str = ""
    smcr_disable_ipv6: bool = Field(True, alias="smcrDisableIPv6")
    driver_install_command: str = Field("", alias="driverInstallCommand")
    nccl: NcclConfig = Field(default_factory=NcclConfig)
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", alias="logLevel")
    resources: list[ResourceKind] = Field(default_factory=_default_resources)
    shared_resources: list[SharedResourceConfig] = Field(
        default_factory=lambda: [SharedResourceConfig()], alias="sharedResources"
    )
    non_host_network_rdma: bool = Field(False, alias="nonHostNetworkRdma")

    @field_validator("resources", mode="before")
    @classmethod
    def _split_resources(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("exposed_local_eris", mode="before")
    @classmethod
    def _split_joined(cls, value: object) -> object:
        """Accept the reference's comma-joined flag form as well as a list."""
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value


#: agent flags that map one-to-one to a field (kept in step with erdma.agent.main by a test)
_FLAGS = frozenset(
    {
        "--node-name", "--host-root", "--kubelet-dir", "--prefer-driver",
        "--allocate-all-devices", "--local-eri-discovery", "--exposed-local-eris",
        "--instance-id", "--slots-per-device", "--prestart-container", "--prepare-node",
        "--host-namespace", "--device-list-strategy", "--cdi-spec-dir", "--rescan-interval",
        "--metrics-port", "--watch-mode", "--resources", "--non-host-network-rdma",
        "--runtime-socket", "--metadata-url", "--jumbo-frame-mtu", "--kubeconfig", "--log-level",
    }
)  # fmt: skip


def _explain(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        loc = [str(p) for p in item["loc"]]
        if loc and loc[0] in AgentConfig.model_fields:
            # Name the key as people write it: the file key, and the flag where there is one.
            field = loc[0]
            alias = AgentConfig.model_fields[field].alias or field
            flag = f"--{field.replace('_', '-')}"
            loc[0] = f"{alias} ({flag})" if flag in _FLAGS and len(loc) == 1 else alias
        key = ".".join(loc) or "(root)"
        shown = item.get("input")
        lines.append(f"{key}={shown!r}: {item['msg']}")
    return "invalid agent configuration: " + "; ".join(lines)


def load_file(path: Path) -> dict[str, Any]:
    """A YAML or JSON mapping; a missing file or non-mapping is a ConfigError."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ConfigError(
            f"config file {path}: not valid {path.suffix[1:] or 'JSON'}: {exc}"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping, got {type(data).__name__}")
    return data


def env_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """`ERDMA_PREFER_DRIVER=ofed` -> {"prefer_driver": "ofed"}; NODE_NAME, RUNTIME_SOCK too."""
    values: dict[str, Any] = {}
    fields = AgentConfig.model_fields
    for key, raw in environ.items():
        if key.startswith(ENV_PREFIX):
            name = key[len(ENV_PREFIX) :].lower()
            if name in fields and name != "nccl":
                values[name] = raw
    if environ.get("NODE_NAME") and "node_name" not in values:
        values["node_name"] = environ["NODE_NAME"]
    if environ.get("RUNTIME_SOCK") and "runtime_socket" not in values:
        values["runtime_socket"] = environ["RUNTIME_SOCK"]
    return values


def build_config(
    file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> AgentConfig:
    """file < env < flags; flags whose value is None were not given and do not override."""
    merged: dict[str, Any] = {}
    if file is not None:
        for key, value in load_file(file).items():
            merged[_field_name(key)] = value
    merged.update(env_values(os.environ if environ is None else environ))
    merged.update({k: v for k, v in (flags or {}).items() if v is not None})
    try:
        return AgentConfig.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_explain(exc)) from None


def _field_name(key: str) -> str:
    """Map a file key (camelCase alias or snake_case) to the field name; unknown keys pass."""
    for name, info in AgentConfig.model_fields.items():
        if key in (name, info.alias):
            return name
    return key
