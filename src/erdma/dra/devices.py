"""What the DRA driver publishes: one ResourceSlice device per usable RDMA device (pure).

The device list is a function of the agent's snapshot, its health rule and the driver mode, so
the device plugin and the DRA driver describe one backend. A taint carries the health code,
never words from the message, so rewording a message leaves every taint as it was. Attribute
names without a domain belong to the driver's domain (`erdma.aliyun.com/kind`); only the
standard PCIe root carries its own (`resource.kubernetes.io/pcieRoot`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from erdma.dra.config import DraConfig, device_kind
from erdma.dra.names import MAX_ATTRIBUTE_STRING, PCIE_ROOT_ATTRIBUTE, SLOTS_CAPACITY
from erdma.host.health import Health
from erdma.host.model import DeviceSnapshot, RdmaDevice

#: the typed health of a device, the agent's rule (erdma.agent.health.device_health)
HealthCheck = Callable[[RdmaDevice], Health]
#: the PCIe root of a PCI address, or None (erdma.dra.pcie.pcie_root_or_none on a host root)
RootOf = Callable[[str | None], str | None]
_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class DeviceNameError(ValueError):
    """An ibdev name that cannot become a ResourceSlice device name."""


def dra_device_name(ibdev: str) -> str:
    """`erdma_0` -> `erdma-0`: slice device names are DNS labels (no '_', at most 63 chars)."""
    name = re.sub(r"[_.]", "-", ibdev.lower())
    if len(name) > 63 or not _LABEL_RE.match(name):
        raise DeviceNameError(
            f"RDMA device {ibdev!r} gives slice device name {name!r}, which is not a DNS label "
            "(lowercase letters, digits and '-', at most 63 characters)"
        )
    return name


@dataclass(frozen=True)
class DraDevice:
    """One published device and the facts its slice entry and CDI edits come from."""

    name: str
    device: RdmaDevice
    health: Health
    pcie_root: str | None

    @property
    def healthy(self) -> bool:
        return self.health.healthy


def inventory(
    snapshot: DeviceSnapshot,
    config: DraConfig,
    *,
    health: HealthCheck,
    root_of: RootOf,
    exposed: Collection[str] | None = None,
) -> dict[str, DraDevice]:
    """{slice device name: device} for the devices DRA owns (and `exposed` allows, if given)."""
    found: dict[str, DraDevice] = {}
    for device in sorted(snapshot.devices, key=lambda d: d.name):
        if not config.owns(device):
            continue
        if exposed is not None and device.is_erdma and device.name not in exposed:
            continue
        try:
            name = dra_device_name(device.name)
        except DeviceNameError:
            continue  # logged by the driver, which sees the same error on each change
        if name in found:
            continue
        found[name] = DraDevice(name, device, health(device), root_of(device.pci_address))
    return found


def _string(value: str) -> dict[str, str]:
    return {"string": value[:MAX_ATTRIBUTE_STRING]}


def attributes(device: DraDevice, mode: str) -> dict[str, dict[str, Any]]:
    """The attributes a DeviceClass or claim can select and align on."""
    rdma = device.device
    attrs: dict[str, dict[str, Any]] = {
        "kind": _string(device_kind(rdma) or "unknown"),
        "ibdev": _string(rdma.name),
        "linkState": _string(_link_state(rdma)),
    }
    optional = {
        "netdev": rdma.netdev,
        "mac": rdma.mac,
        "pnetid": rdma.pnetid,
        "pciAddress": rdma.pci_address,
    }
    attrs.update({key: _string(value) for key, value in optional.items() if value})
    if rdma.numa_node is not None:
        attrs["numaNode"] = {"int": rdma.numa_node}
    if rdma.is_erdma and mode:
        attrs["driverMode"] = _string(mode)
    if device.pcie_root:
        attrs[PCIE_ROOT_ATTRIBUTE] = _string(device.pcie_root)
    return attrs


def _link_state(device: RdmaDevice) -> str:
    if device.active:
        return "ACTIVE"
    return device.ports[0].state if device.ports else "NOPORT"


def slice_devices(
    devices: Mapping[str, DraDevice], config: DraConfig, mode: str
) -> list[dict[str, Any]]:
    """The `spec.devices` list: unhealthy devices withdrawn, or tainted NoSchedule."""
    entries = []
    for name, device in sorted(devices.items()):
        if not device.healthy and config.unhealthy == "withdraw":
            continue
        entry: dict[str, Any] = {"name": name, "attributes": attributes(device, mode)}
        if config.consumable_capacity:
            slots = str(config.slots_per_device)
            entry["allowMultipleAllocations"] = True
            entry["capacity"] = {
                SLOTS_CAPACITY: {
                    "value": slots,
                    "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": slots}},
                }
            }
        if not device.healthy:
            entry["taints"] = [
                {
                    "key": f"{config.driver_name}/unhealthy",
                    "value": device.health.code.value,
                    "effect": "NoSchedule",
                }
            ]
        entries.append(entry)
    return entries


def published(entries: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """Names of the devices a claim may be allocated now (healthy or not, as published)."""
    return frozenset(str(e["name"]) for e in entries)
