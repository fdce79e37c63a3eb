"""Fixture hosts: a faithful sys/, dev/ and proc/ tree built from a small description.

The layout follows the real kernel's (class symlinks into devices/pci..., `device` and `driver`
links, uverbs found through `infiniband_verbs/*/ibdev`), so discovery is tested against the same
shapes it meets on a node. Device nodes are real (`os.mknod`) when running as root, otherwise
regular files listed in `dev/.manifest.json`.

The descriptions and named variants live in `fakehost_specs`; they are re-exported here so that
callers use `fakehost.HostSpec`, `fakehost.variant(...)` and `fakehost.build(...)` alike.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import stat
from dataclasses import replace
from pathlib import Path

from erdma.host import guid as guids
from erdma.sim.fakehost_specs import (
    ERDMA0,
    ERDMA1,
    VARIANTS,
    FakeNetdev,
    FakeRdma,
    HostSpec,
    erdma_node,
    lingjun_node,
    mlx5_hca,
    variant,
)

UVERBS_MAJOR = 231
UVERBS_BASE_MINOR = 192
UMAD_BASE_MINOR = 0
ISSM_BASE_MINOR = 64
RDMA_CM_DEV = (10, 58)
GID_TABLE_LEN = 16


class FakeHost:
    """A built fixture tree plus the operations tests and `erdma sim` perform on it."""

    def __init__(self, root: str | os.PathLike[str], spec: HostSpec) -> None:
        self.root = Path(root)
        self.spec = spec
        self.real_nodes = os.geteuid() == 0
        self._manifest: list[dict[str, object]] = []

    # -- building -------------------------------------------------------------------------
    def build(self) -> FakeHost:
        for sub in ("sys", "dev", "proc"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for netdev in self.spec.netdevs:
            self._netdev(netdev)
        self._netdev(FakeNetdev("lo", "00:00:00:00:00:00", ""), virtual=True)
        for device in self.spec.rdma:
            self._rdma(device)
        self._modules()
        self._gpus()
        if self.spec.rdma_cm:
            self._rdma_cm()
        self._write(self.sys / "class/infiniband_verbs/abi_version", "6")
        self._write(self.root / "proc/sys/net/ipv6/conf/all/disable_ipv6", "0")
        self._save_manifest()
        return self

    @property
    def sys(self) -> Path:
        return self.root / "sys"

    def _write(self, path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")

    def _link(self, link: Path, target: Path) -> None:
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(target, link.parent))

    def _pci_dir(self, address: str) -> Path:
        return self.sys / "devices" / f"pci{address[:7]}" / address

    def _pci_function(
        self, address: str, vendor: int, device: int, driver: str, numa: object
    ) -> Path:
        func = self._pci_dir(address)
        self._write(func / "vendor", f"0x{vendor:04x}")
        self._write(func / "device", f"0x{device:04x}")
        self._write(func / "numa_node", str(numa))
        self._write(func / "modalias", f"pci:v0000{vendor:04X}d0000{device:04X}sv*sd*bc*sc*i*")
        driver_dir = self.sys / "bus/pci/drivers" / driver
        driver_dir.mkdir(parents=True, exist_ok=True)
        self._link(func / "driver", driver_dir)
        self._link(driver_dir / address, func)
        self._link(self.sys / "bus/pci/devices" / address, func)
        return func

    def _netdev(self, netdev: FakeNetdev, virtual: bool = False) -> None:
        if virtual:
            node = self.sys / "devices/virtual/net" / netdev.name
        else:
            func = self._pci_dir(netdev.pci)
            if not (func / "vendor").exists():
                self._pci_function(netdev.pci, 0x1AF4, 0x1000, "virtio-pci", 0)
            node = func / "net" / netdev.name
            self._link(node / "device", func)
        index = (
            1 + len(list((self.sys / "class/net").glob("*")))
            if (self.sys / "class/net").exists()
            else 1
        )
        self._write(node / "address", netdev.mac)
        self._write(node / "operstate", netdev.operstate)
        self._write(node / "mtu", str(netdev.mtu))
        self._write(node / "ifindex", str(index))
        self._link(self.sys / "class/net" / netdev.name, node)

    def _rdma(self, dev: FakeRdma) -> None:
        func = self._pci_function(dev.pci, dev.vendor, dev.device, dev.driver, dev.numa)
        ib = func / "infiniband" / dev.name
        mac = guids.parse_mac(self._netdev_spec(dev.netdev).mac) or bytes(6)
        guid = guids.format_guid(guids.mac_to_guid(mac))
        self._write(ib / "node_type", "4: RNIC" if dev.mode == "iwarp" else "1: CA")
        self._write(ib / "node_guid", guid)
        self._write(ib / "sys_image_guid", guid)
        self._write(ib / "fw_ver", dev.fw_ver)
        self._write(ib / "node_desc", dev.node_desc)
        self._link(ib / "device", func)
        self._port(dev, ib / "ports/1", mac)
        self._chardev(
            func,
            "infiniband_verbs",
            f"uverbs{dev.uverbs}",
            dev.name,
            UVERBS_BASE_MINOR + dev.uverbs,
        )
        if dev.mad:
            self._chardev(
                func, "infiniband_mad", f"umad{dev.uverbs}", dev.name, UMAD_BASE_MINOR + dev.uverbs
            )
            self._chardev(
                func, "infiniband_mad", f"issm{dev.uverbs}", dev.name, ISSM_BASE_MINOR + dev.uverbs
            )
        # last, as the kernel announces a device once it is whole: a rescan that runs while a
        # device is hot-added finds all of it or none of it
        self._link(self.sys / "class/infiniband" / dev.name, ib)

    def _netdev_spec(self, name: str) -> FakeNetdev:
        return next(n for n in self.spec.netdevs if n.name == name)

    def _port(self, dev: FakeRdma, port: Path, mac: bytes) -> None:
        self._write_port_state(port, dev.port_active)
        self._write(port / "link_layer", "InfiniBand" if dev.mode == "ib" else "Ethernet")
        self._write(port / "rate", "100 Gb/sec (4X EDR)")
        entries = self._gid_entries(dev, mac)
        for index in range(GID_TABLE_LEN if dev.mode != "iwarp" else 1):
            gid, kind = entries[index] if index < len(entries) else (":".join(["0000"] * 8), None)
            self._write(port / "gids" / str(index), gid)
            if dev.mode != "iwarp":
                self._write(port / "gid_attrs/types" / str(index), kind or "")
                self._write(port / "gid_attrs/ndevs" / str(index), dev.netdev if kind else "")
        if dev.mode != "iwarp":
            self._write(port / "pkeys/0", "0xffff")

    def _gid_entries(self, dev: FakeRdma, mac: bytes) -> list[tuple[str, str | None]]:
        if dev.mode == "iwarp":
            return [(_groups(mac + bytes(10)), None)]
        link_local = b"\xfe\x80" + bytes(6) + guids.mac_to_guid(mac)
        entries: list[tuple[str, str | None]] = [(_groups(link_local), "RoCE v2")]
        for cidr in self._netdev_spec(dev.netdev).ipv4:
            addr = ipaddress.IPv4Interface(cidr).ip
            entries.append((_groups(bytes(10) + b"\xff\xff" + addr.packed), "RoCE v2"))
        return entries

    def _chardev(self, func: Path, cls: str, entry: str, ibdev: str, minor: int) -> None:
        node = func / cls / entry
        self._write(node / "ibdev", ibdev)
        self._write(node / "dev", f"{UVERBS_MAJOR}:{minor}")
        self._write(node / "abi_version", "1")
        self._link(node / "device", func)
        self._link(self.sys / "class" / cls / entry, node)
        self.mknod(f"/dev/infiniband/{entry}", UVERBS_MAJOR, minor)

    def _rdma_cm(self) -> None:
        major, minor = RDMA_CM_DEV
        self._write(self.sys / "class/misc/rdma_cm/dev", f"{major}:{minor}")
        self.mknod("/dev/infiniband/rdma_cm", major, minor)

    def _modules(self) -> None:
        module = self.sys / "module"
        self._write(module / "ib_core/parameters/netns_mode", self.spec.netns_mode)
        if self.spec.erdma_loaded:
            (module / "erdma").mkdir(parents=True, exist_ok=True)
            if self.spec.compat_mode is not None:
                self._write(module / "erdma/parameters/compat_mode", self.spec.compat_mode)
        if self.spec.smc_loaded:
            (module / "smc").mkdir(parents=True, exist_ok=True)

    def _gpus(self) -> None:
        for address, numa in self.spec.gpus:
            self._pci_function(address, 0x10DE, 0x2330, "nvidia", numa)
            self._write(
                self.root / "proc/driver/nvidia/gpus" / address / "information", "Model: H20"
            )

    # -- device nodes ---------------------------------------------------------------------
    def mknod(self, dev_path: str, major: int, minor: int, mode: int = 0o666) -> None:
        path = self.root / dev_path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            path.unlink()
        if self.real_nodes:
            os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
        else:
            path.write_text("")
        self._manifest = [m for m in self._manifest if m["path"] != dev_path]
        self._manifest.append(
            {"path": dev_path, "type": "c", "major": major, "minor": minor, "mode": oct(mode)}
        )

    def _save_manifest(self) -> None:
        manifest = self.root / "dev/.manifest.json"
        manifest.write_text(
            json.dumps(sorted(self._manifest, key=lambda m: str(m["path"])), indent=1)
        )

    # -- changes at run time --------------------------------------------------------------
    def set_port_state(self, device: str, active: bool) -> None:
        """Port ACTIVE/LinkUp or DOWN/Disabled, as the kernel shows a netdev link change."""
        self._write_port_state(self._ib_dir(device) / "ports/1", active)

    def _write_port_state(self, port: Path, active: bool) -> None:
        self._write(port / "state", "4: ACTIVE" if active else "1: DOWN")
        self._write(port / "phys_state", "5: LinkUp" if active else "3: Disabled")

    def remove_node(self, dev_path: str) -> None:
        (self.root / dev_path.lstrip("/")).unlink(missing_ok=True)

    def add_device(self, netdev: FakeNetdev | None, device: FakeRdma) -> None:
        """Hot-add (or late driver load): the device appears after the agent started.
        ``netdev`` None: the device's netdev is already there (an ENI that gains RDMA)."""
        netdevs = self.spec.netdevs if netdev is None else (*self.spec.netdevs, netdev)
        self.spec = replace(self.spec, netdevs=netdevs, rdma=(*self.spec.rdma, device))
        if netdev is not None:
            self._netdev(netdev)
        self._rdma(device)
        self._save_manifest()

    def load_driver(self, spec: HostSpec) -> None:
        """The erdma module loads late: its devices and parameters appear."""
        self.spec = replace(spec, netdevs=self.spec.netdevs)
        for netdev in spec.netdevs:
            if not (self.sys / "class/net" / netdev.name).exists():
                self._netdev(netdev)
        for device in spec.rdma:
            self._rdma(device)
        self._modules()
        if spec.rdma_cm:
            self._rdma_cm()
        self._save_manifest()

    def _ib_dir(self, device: str) -> Path:
        return (self.sys / "class/infiniband" / device).resolve()

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # -- kernel modules and GID tables (driver preparation, NCCL) -------------------------
    def module_loaded(self, name: str) -> bool:
        return (self.sys / "module" / name).is_dir()

    def load_module(self, name: str, params: dict[str, str] | None = None) -> None:
        """What the kernel shows after loading a module: its dir, parameters, refcnt 0."""
        module = self.sys / "module" / name
        for param, value in (params or {}).items():
            self._write(module / "parameters" / param, value)
        self._write(module / "refcnt", "0")

    def unload_module(self, name: str) -> None:
        shutil.rmtree(self.sys / "module" / name, ignore_errors=True)

    def set_refcount(self, name: str, count: int) -> None:
        """Users holding a loaded module (open verbs contexts, dependent modules)."""
        self._write(self.sys / "module" / name / "refcnt", str(count))

    def insert_gid(self, device: str, index: int, address: str) -> None:
        """Put a RoCE v2 GID for `address` at `index`, moving later entries up one slot.

        This is the table of a netdev whose addresses arrived in another order (an IPv6
        global address before the IPv4 one), so its first IPv4 GID index differs. RoCE-style
        (compat) tables only: an iWARP port has a single GID and no gid_attrs.
        """
        port = self._ib_dir(device) / "ports/1"
        ip = ipaddress.ip_address(address)
        packed = ip.packed if ip.version == 6 else bytes(10) + b"\xff\xff" + ip.packed
        netdev = next(d.netdev for d in self.spec.rdma if d.name == device)
        entries = [
            (
                (port / "gids" / str(i)).read_text().strip(),
                (port / "gid_attrs/types" / str(i)).read_text().strip(),
                (port / "gid_attrs/ndevs" / str(i)).read_text().strip(),
            )
            for i in range(GID_TABLE_LEN)
        ]
        entries.insert(index, (_groups(packed), "RoCE v2", netdev))
        for i, (gid, kind, ndev) in enumerate(entries[:GID_TABLE_LEN]):
            self._write(port / "gids" / str(i), gid)
            self._write(port / "gid_attrs/types" / str(i), kind)
            self._write(port / "gid_attrs/ndevs" / str(i), ndev)


def _groups(raw: bytes) -> str:
    hexed = raw.hex()
    return ":".join(hexed[i : i + 4] for i in range(0, 32, 4))


def build(root: str | os.PathLike[str], spec: HostSpec | str = "default") -> FakeHost:
    """Build a fixture host at `root` from a spec or a variant name."""
    return FakeHost(root, variant(spec) if isinstance(spec, str) else spec).build()


__all__ = [
    "ERDMA0",
    "ERDMA1",
    "VARIANTS",
    "FakeHost",
    "FakeNetdev",
    "FakeRdma",
    "HostSpec",
    "build",
    "erdma_node",
    "lingjun_node",
    "mlx5_hca",
    "variant",
]
