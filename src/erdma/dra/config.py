"""DRA driver settings: the `dra:` block of the agent configuration and of the chart values.

One pydantic model is the source; the agent embeds it as `AgentConfig.dra` and the chart
renders the same keys. A bad value names its key (`dra.unhealthy`), the value, and what would
be accepted, like every other agent setting.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from erdma.dra.names import DRIVER_NAME
from erdma.host.model import RdmaDevice
from erdma.settings import ChartValue

DeviceKind = Literal["erdma", "mlx5"]
MLX5_DRIVER = "mlx5_core"
# a DNS subdomain of at most 63 characters, as ResourceSlice.spec.driver requires
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DRIVER_RE = re.compile(rf"^(?=.{{1,63}}$){_LABEL}(\.{_LABEL})*$")


def device_kind(device: RdmaDevice) -> DeviceKind | None:
    """`erdma` for Alibaba eRDMA, `mlx5` for Mellanox HCAs, None for what DRA never publishes."""
    if device.is_erdma:
        return "erdma"
    if device.driver == MLX5_DRIVER:
        return "mlx5"
    return None


def _default_kinds() -> list[DeviceKind]:
    return ["erdma"]


class DraConfig(BaseModel):
    """How the agent's DRA driver publishes and prepares devices (off unless `enabled`)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    enabled: Annotated[
        bool,
        ChartValue(
            "dra.enabled",
            description="run the DRA driver in the agent; the device plugin then leaves the DRA "
            "devices out. Mounts kubelet's plugins and plugins_registry directories "
            "and /var/run/cdi.",
        ),
    ] = Field(False, description="serve the DRA driver (resource.k8s.io/v1)")
    driver_name: Annotated[
        str,
        ChartValue(
            "dra.driverName",
            description="ResourceSlice driver, attribute domain and DeviceClass name",
        ),
    ] = Field(DRIVER_NAME, alias="driverName", description="the driver name in ResourceSlices")
    device_kinds: Annotated[
        list[DeviceKind],
        ChartValue(
            "dra.deviceKinds",
            description="which RDMA devices DRA publishes: erdma, and mlx5 for Mellanox HCAs",
        ),
    ] = Field(
        default_factory=_default_kinds,
        alias="deviceKinds",
        description="which kinds of RDMA device the DRA driver publishes",
    )
    devices: Annotated[list[str], ChartValue("dra.devices")] = Field(
        default_factory=lambda: ["*"],
        description="ibdev name globs the DRA driver takes; the device plugin keeps the rest",
    )
    unhealthy: Annotated[
        Literal["withdraw", "taint"],
        ChartValue(
            "dra.unhealthy",
            description="an unhealthy device is withdrawn from the slice, or kept with a "
            'NoSchedule taint ("taint" needs the DRADeviceTaints feature gate)',
        ),
    ] = Field(
        "withdraw",
        description="an unhealthy device is withdrawn from the slice, or kept with a "
        "NoSchedule device taint",
    )
    consumable_capacity: Annotated[
        bool,
        ChartValue(
            "dra.consumableCapacity",
            description='publish allowMultipleAllocations and a "slots" capacity '
            "(DRAConsumableCapacity gate): several claims share one device. Off: share "
            "a device through one shared ResourceClaim.",
        ),
    ] = Field(
        False,
        alias="consumableCapacity",
        description="publish `allowMultipleAllocations` and a `slots` capacity (1.34+)",
    )
    slots_per_device: Annotated[int, ChartValue("dra.slotsPerDevice")] = Field(
        200,
        alias="slotsPerDevice",
        ge=1,
        le=10000,
        description="the `slots` capacity of each device with consumableCapacity",
    )
    delete_slices_on_stop: Annotated[bool, ChartValue("dra.deleteSlicesOnStop")] = Field(
        False,
        alias="deleteSlicesOnStop",
        description="delete this node's ResourceSlices whenever the agent stops; off, a restart "
        "or rolling update keeps the slice for the next agent to take over, and on uninstall the "
        "chart's hook (Regular mode) or the kubelet, 30 s after the driver unregisters, deletes it",
    )

    @field_validator("driver_name")
    @classmethod
    def _driver(cls, value: str) -> str:
        if not _DRIVER_RE.match(value):
            raise ValueError(
                f"{value!r} is not a DRA driver name: use a lowercase DNS subdomain of at most "
                "63 characters, such as 'erdma.aliyun.com'"
            )
        return value

    @field_validator("devices")
    @classmethod
    def _globs(cls, values: list[str]) -> list[str]:
        for value in values:
            if not value or value.count("[") != value.count("]"):
                raise ValueError(
                    f"{value!r} is not a valid glob: use ibdev names with *, ? and balanced [...]"
                )
        return values

    @field_validator("device_kinds", "devices", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        """Accept the comma-joined form that env variables and flags give."""
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    def owns(self, device: RdmaDevice) -> bool:
        """Whether the DRA driver publishes `device` (so the device plugin must not)."""
        if not self.enabled or device_kind(device) not in self.device_kinds:
            return False
        return any(fnmatch.fnmatchcase(device.name, glob) for glob in self.devices)


def dra_owned(config: DraConfig, devices: Iterable[RdmaDevice]) -> frozenset[str]:
    """The ibdev names the DRA driver takes: the device plugin leaves exactly these out."""
    return frozenset(d.name for d in devices if config.owns(d))
