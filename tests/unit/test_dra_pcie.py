"""pcieRoot from sysfs: the host bridge above a function, whatever sits in between."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from erdma.dra import pcie_root, pcie_root_or_none
from erdma.dra.pcie import PcieRootError
from erdma.host.devices import scan
from erdma.sim import fakehost


def link(root: Path, address: str, *chain: str) -> None:
    """devices/<chain...>/<address> with bus/pci/devices/<address> pointing at it."""
    target = root / "sys" / "devices" / Path(*chain) / address
    target.mkdir(parents=True)
    bus = root / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True, exist_ok=True)
    (bus / address).symlink_to(os.path.relpath(target, bus))


def test_functions_behind_bridges_share_their_host_bridge(tmp_path):
    link(tmp_path, "0000:03:00.0", "pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:04.0")
    link(tmp_path, "0000:04:00.0", "pci0000:00", "0000:00:02.0")
    link(tmp_path, "0000:85:00.0", "pci0000:80", "0000:80:01.0")
    assert pcie_root(tmp_path, "0000:03:00.0") == "pci0000:00"
    assert pcie_root(tmp_path, "0000:04:00.0") == "pci0000:00"
    assert pcie_root(tmp_path, "0000:85:00.0") == "pci0000:80"


def test_fixture_host_with_gpus_on_two_roots(tmp_path):
    spec = replace(fakehost.erdma_node(), gpus=(("0000:00:08.0", 0), ("0000:80:08.0", 1)))
    snapshot = scan(fakehost.build(tmp_path, spec).root)
    nic = {d.name: pcie_root(tmp_path, str(d.pci_address)) for d in snapshot.devices}
    gpu = [pcie_root(tmp_path, g.pci_address) for g in snapshot.gpus]
    assert nic == {"erdma_0": gpu[0], "erdma_1": gpu[1]} and gpu[0] != gpu[1]


def test_bad_or_missing_addresses_say_why(tmp_path):
    with pytest.raises(PcieRootError, match=r"'07\.0' is not a bus ID: expected DDDD:BB:DD\.F"):
        pcie_root(tmp_path, "07.0")
    with pytest.raises(PcieRootError, match="cannot be resolved"):
        pcie_root(tmp_path, "0000:00:07.0")
    assert pcie_root_or_none(tmp_path, None) is None
    assert pcie_root_or_none(tmp_path, "0000:00:07.0") is None
