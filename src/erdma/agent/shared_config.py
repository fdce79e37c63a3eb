"""The settings of one shared resource such as ``rdma/hca: 1k``: its name, capacity, the
selectors that pick its HCAs and the char devices they must have.

A model of its own beside ``AgentConfig`` (which lists them as ``sharedResources``), so the
agent's settings module stays one job: the agent-wide settings and how they are filled.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from erdma.settings import ChartValue

# what the chart's schema checks of selector entries, with its own definitions
GLOBS: dict[str, Any] = {"chart": {"items": {"definition": "glob"}}}
PCI_IDS: dict[str, Any] = {"chart": {"items": {"definition": "pciId"}}}

CharKind = Literal["uverbs", "rdma_cm", "umad", "issm"]


def _default_chars() -> list[CharKind]:
    return ["uverbs", "rdma_cm"]


class SharedSelectors(BaseModel):
    """Which RDMA devices form a shared resource; every non-empty list must match (AND).

    The default selects Mellanox `mlx5_core` HCAs, what Lingjun nodes carry.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    ibdev_names: list[str] = Field(
        default_factory=list, alias="ibdevNames", json_schema_extra=GLOBS
    )
    drivers: list[str] = Field(
        default_factory=lambda: ["mlx5_core"],
        json_schema_extra={"chart": {"items": {"type": "string", "minLength": 1}}},
    )
    vendors: list[str] = Field(default_factory=list, json_schema_extra=PCI_IDS)  # e.g. "15b3"
    device_ids: list[str] = Field(
        default_factory=list, alias="deviceIDs", json_schema_extra=PCI_IDS
    )
    netdev_names: list[str] = Field(
        default_factory=list, alias="netdevNames", json_schema_extra=GLOBS
    )

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

    name: Annotated[
        str, ChartValue("sharedRdma.resourceName", description="extended resource name")
    ] = Field("rdma/hca", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9][-A-Za-z0-9_.]*$")
    capacity: Annotated[
        int,
        ChartValue(
            "sharedRdma.capacity",
            description="slots per node (1000 shows as 1k); one slot gives a container every "
            "selected HCA",
        ),
    ] = Field(1000, ge=1, le=100000)
    selectors: Annotated[
        SharedSelectors,
        ChartValue(
            "sharedRdma.selectors",
            description="which RDMA devices are shared: ibdevNames, drivers, vendors, deviceIDs, "
            "netdevNames; every non-empty list must match",
        ),
    ] = Field(default_factory=SharedSelectors)
    required_char_devices: Annotated[
        list[CharKind],
        ChartValue(
            "sharedRdma.requiredCharDevices",
            description="char devices that must exist for the slots to be Healthy: uverbs, "
            "rdma_cm, umad, issm",
        ),
    ] = Field(
        default_factory=_default_chars,
        alias="requiredCharDevices",
        json_schema_extra={"chart": {"uniqueItems": True}},
    )
