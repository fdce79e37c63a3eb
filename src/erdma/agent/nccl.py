"""NCCL environment for a container's allocated eRDMA devices (pure; called from Allocate).

NCCL finds eRDMA only through verbs in the RoCE-like personality (compat_mode=Y: `compat`,
`ofed`), and picks the wrong GID unless told which one carries the node's IPv4 address. The
plugin knows exactly which devices it mounted, so it can say both precisely:

- `NCCL_IB_HCA==erdma_0,erdma_1`: the exact-name form (a leading `=`), so `erdma_1` never
  also matches `erdma_10`;
- `NCCL_IB_GID_INDEX`: the first RoCE v2 IPv4 GID index, when every device has the same one;
  otherwise NCCL's own selection restricted to IPv4 RoCE v2 (`-1`, `AF_INET`, version 2),
  because a single index cannot be right for devices whose tables differ;
- `NCCL_SOCKET_IFNAME` when configured (the bootstrap interface is a cluster choice).

Nothing is set in `default` mode (iWARP), where NCCL cannot use the device. The kubelet puts
device-plugin envs before the container's own, so a pod's `env` always wins (see README).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from erdma.host.driver import DriverMode
from erdma.host.model import RdmaDevice
from erdma.settings import ChartValue

#: an environment variable name, the keys of `overrides`
_ENV_NAME = "^[A-Za-z_][A-Za-z0-9_]*$"


class NcclConfig(BaseModel):
    """NCCL env for GPU pods in compat/ofed mode; see erdma.agent.nccl.

    `overrides` replace computed values; an empty value removes that variable.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

    enabled: Annotated[
        bool, ChartValue("agent.nccl.enabled", description="set the NCCL environment of GPU pods")
    ] = True
    socket_ifname: Annotated[
        str,
        ChartValue(
            "agent.nccl.socketIfname", description="NCCL_SOCKET_IFNAME; empty: decided per node"
        ),
    ] = Field("", alias="socketIfname", pattern=r"^(\^?=?[\w.:@-]+(,[\w.:@-]+)*)?$")
    gid_index: Annotated[
        int | None,
        ChartValue("agent.nccl.gidIndex", description="NCCL_IB_GID_INDEX; null: decided per node"),
    ] = Field(None, alias="gidIndex", ge=-1, le=255)
    overrides: Annotated[
        dict[str, str],
        ChartValue(
            "agent.nccl.overrides",
            description="extra NCCL_* variables, name to value; an empty value removes that "
            "variable",
        ),
    ] = Field(
        default_factory=dict,
        # the chart also lists the names as patternProperties: Helm's schema errors name the
        # key (agent.nccl.overrides) for those, but not for a propertyNames mismatch
        json_schema_extra={
            "propertyNames": {"pattern": _ENV_NAME},
            "chart": {
                "patternProperties": {_ENV_NAME: {"type": "string"}},
                "additionalProperties": False,
            },
        },
    )

    @field_validator("overrides")
    @classmethod
    def _env_names(cls, values: dict[str, str]) -> dict[str, str]:
        for key in values:
            if not re.match(_ENV_NAME, key):
                raise ValueError(
                    f"key {key!r} is not an environment variable name; use letters, digits "
                    "and underscores, not starting with a digit"
                )
        return values


log = logging.getLogger(__name__)

ROCE_V2 = "RoCE v2"


@dataclass(frozen=True)
class NcclEnv:
    """The variables for one container, and notes worth logging or showing with the pod."""

    envs: dict[str, str]
    notes: tuple[str, ...] = ()


def first_ipv4_gid_index(device: RdmaDevice) -> int | None:
    """The lowest GID index holding an IPv4-mapped RoCE v2 GID on any port, or None."""
    indexes = [
        gid.index
        for port in device.ports
        for gid in port.gids
        if gid.type == ROCE_V2 and gid.ipv4 is not None
    ]
    return min(indexes, default=None)


def nccl_env(devices: Sequence[RdmaDevice], mode: DriverMode, settings: NcclConfig) -> NcclEnv:
    """The NCCL variables for one container's allocated devices."""
    if not settings.enabled or not devices:
        return NcclEnv({})
    if not mode.compat_mode:
        return NcclEnv({}, ("NCCL variables not set: the default driver mode is iWARP",))
    envs = {"NCCL_IB_HCA": "=" + ",".join(d.name for d in devices)}
    notes: list[str] = []
    if settings.gid_index is not None:
        envs["NCCL_IB_GID_INDEX"] = str(settings.gid_index)
    else:
        envs.update(_gid_envs(devices, notes))
    if settings.socket_ifname:
        envs["NCCL_SOCKET_IFNAME"] = settings.socket_ifname
    for key, value in settings.overrides.items():
        if value:
            envs[key] = value
        else:
            envs.pop(key, None)
    return NcclEnv(envs, tuple(notes))


def _gid_envs(devices: Sequence[RdmaDevice], notes: list[str]) -> dict[str, str]:
    """One common index, or NCCL's IPv4 RoCE v2 auto-selection when the devices disagree."""
    found = {d.name: first_ipv4_gid_index(d) for d in devices}
    indexes = set(found.values())
    if len(indexes) == 1 and None not in indexes:
        return {"NCCL_IB_GID_INDEX": str(indexes.pop())}
    listed = ", ".join(f"{name}={'none' if i is None else i}" for name, i in found.items())
    note = (
        f"first RoCE v2 IPv4 GID index differs between devices ({listed}); set "
        "NCCL_IB_GID_INDEX=-1 NCCL_IB_ADDR_FAMILY=AF_INET NCCL_IB_ROCE_VERSION_NUM=2 so NCCL "
        "picks the IPv4 RoCE v2 GID of each device"
    )
    log.warning(note)
    notes.append(note)
    return {
        "NCCL_IB_GID_INDEX": "-1",
        "NCCL_IB_ADDR_FAMILY": "AF_INET",
        "NCCL_IB_ROCE_VERSION_NUM": "2",
    }
