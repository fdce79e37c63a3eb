"""The PCIe root complex of a PCI function, for `resource.kubernetes.io/pcieRoot`.

The scheduler aligns a GPU and a NIC with `matchAttribute: resource.kubernetes.io/pcieRoot`,
which only works if every driver computes the value by the same rule. The rule is upstream's
(k8s.io/dynamic-resource-allocation/deviceattribute): resolve `/sys/bus/pci/devices/<BDF>` and
take the first component under `/sys/devices/`, the host bridge `pciDDDD:BB`. A GPU behind the
same root (through any number of bridges and switches) gets the same value as the NIC.

It reads only the host root it is given, like discovery, so fixture hosts test it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from erdma.host.sysfs import HostRoot

_ROOT_RE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
_BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


class PcieRootError(ValueError):
    """The PCI function has no readable root; the message says what was looked at."""


def pcie_root(root: str | os.PathLike[str], pci_address: str) -> str:
    """`pci0000:00` for `0000:00:07.0` (and for anything behind the same host bridge)."""
    address = pci_address.lower()
    if not _BDF_RE.match(address):
        raise PcieRootError(
            f"PCI address {pci_address!r} is not a bus ID: expected DDDD:BB:DD.F such as "
            "'0000:00:07.0'"
        )
    host = HostRoot(root)
    link = host.sys / "bus" / "pci" / "devices" / address
    try:
        resolved = Path(os.path.realpath(link, strict=True))
        devices = Path(os.path.realpath(host.sys / "devices", strict=True))
    except OSError as exc:
        raise PcieRootError(f"{link} cannot be resolved: {exc.strerror or exc}") from None
    try:
        parts = resolved.relative_to(devices).parts
    except ValueError:
        raise PcieRootError(f"{link} resolves to {resolved}, outside {devices}") from None
    if len(parts) < 2 or not _ROOT_RE.match(parts[0]):
        raise PcieRootError(
            f"{link} resolves to {resolved}, which is not under a PCI host bridge "
            "(devices/pciDDDD:BB/...)"
        )
    return parts[0]


def pcie_root_or_none(root: str | os.PathLike[str], pci_address: str | None) -> str | None:
    """The root, or None for a device without a PCI function or a readable sysfs link."""
    if not pci_address:
        return None
    try:
        return pcie_root(root, pci_address)
    except PcieRootError:
        return None
