"""Discovery: `scan(root)` turns a host's sysfs and /dev into a DeviceSnapshot.

It is a pure function of the tree under `root`; nothing else in the project reads sysfs for
devices. Devices are found under class/infiniband whatever their PCI class (eRDMA is class
0x00ff, not network 0x02). A device that cannot be used is skipped with a reason, never a crash.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from erdma.host import guid as guids
from erdma.host.model import (
    CharDevice,
    DeviceSnapshot,
    Gid,
    Gpu,
    ModuleState,
    Port,
    RdmaDevice,
    Skipped,
)
from erdma.host.sysfs import (
    HostRoot,
    link_name,
    list_dir,
    read_code_label,
    read_int,
    read_text,
    resolved_name,
)

#: Linux's ceiling on NUMA node IDs (MAX_NUMNODES, 1 << CONFIG_NODES_SHIFT, at most 1024);
#: a larger value is garbage, and one wider than int64 cannot even go to kubelet
MAX_NUMA_NODES = 1024
NODE_TYPES = {1: "CA", 2: "SWITCH", 3: "ROUTER", 4: "RNIC", 5: "USNIC", 6: "USNIC_UDP"}
_CHARDEV_NAME = re.compile(r"^(uverbs|umad|issm)\d+$")
SHOWN_CHARS = 40  # of a bad value quoted in a note; notes are logged, and sysfs files can be huge


def _quoted(text: str) -> str:
    """A bad value for a note: whole when short, else its start and how much was read."""
    if len(text) <= SHOWN_CHARS:
        return repr(text)
    return f"{text[:SHOWN_CHARS]!r}... ({len(text)} characters read)"


def scan(root: str | os.PathLike[str] = "/") -> DeviceSnapshot:
    host = HostRoot(root)
    chardevs = _char_devices_by_ibdev(host)
    netdevs = _netdev_macs(host)
    devices: list[RdmaDevice] = []
    skipped: list[Skipped] = []
    for name in list_dir(host.sys / "class" / "infiniband"):
        try:
            device = _read_device(host, name, chardevs, netdevs)
        except (OSError, ValueError) as exc:  # anything sysfs can throw at us
            device = Skipped(name, f"unreadable: {exc}")
        if isinstance(device, Skipped):  # the agent logs it when it appears or changes
            skipped.append(device)
        else:
            devices.append(device)
    return DeviceSnapshot(
        devices=tuple(devices),
        skipped=tuple(skipped),
        rdma_cm=_rdma_cm(host),
        modules=_modules(host),
        gpus=_nvidia_gpus(host),
    )


def _read_device(
    host: HostRoot,
    name: str,
    chardevs: dict[str, dict[str, list[CharDevice]]],
    netdevs: dict[bytes, str],
) -> RdmaDevice | Skipped:
    base = host.sys / "class" / "infiniband" / name
    if not base.is_dir():
        return Skipped(name, f"{base} is not a readable directory (dangling or looping link)")
    notes: list[str] = []
    own = chardevs.get(name, {})
    uverbs = own.get("uverbs", [])
    if not uverbs:
        return Skipped(
            name,
            "no uverbs char device maps to it (class/infiniband_verbs/*/ibdev); "
            "is ib_uverbs loaded?",
        )
    pci = base / "device"
    guid_text = read_text(base / "node_guid")
    guid_bytes = guids.parse_guid(guid_text) if guid_text else None
    if guid_text is not None and guid_bytes is None:
        notes.append(f"node_guid {_quoted(guid_text)} is not a GUID (expected xxxx:xxxx:xxxx:xxxx)")
    type_code, _ = read_code_label(base / "node_type")
    numa = _numa(pci / "numa_node", notes)
    netdev = _paired_netdev(host, base, guid_bytes, netdevs)
    mac = _netdev_mac(host, netdev) if netdev else None
    if netdev is None:
        notes.append("no paired netdev found (MAC/GUID pairing, device/net, GID ndevs)")
    return RdmaDevice(
        name=name,
        driver=link_name(pci / "driver"),
        pci_address=resolved_name(pci),
        vendor_id=read_int(pci / "vendor", 16),
        device_id=read_int(pci / "device", 16),
        node_guid=guids.format_guid(guid_bytes) if guid_bytes else None,
        node_type=NODE_TYPES.get(type_code) if type_code is not None else None,
        fw_ver=read_text(base / "fw_ver"),
        node_desc=read_text(base / "node_desc"),
        numa_node=numa,
        netdev=netdev,
        mac=guids.format_mac(mac) if mac else None,
        pnetid=guids.pnetid_for_mac(mac) if mac else None,
        ports=tuple(_ports(base / "ports")),
        uverbs=uverbs[0],
        umad=tuple(own.get("umad", [])),
        issm=tuple(own.get("issm", [])),
        notes=tuple(notes),
    )


def _numa(path: Path, notes: list[str]) -> int | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        notes.append(f"numa_node {_quoted(text)} is not a number; treated as no NUMA affinity")
        return None
    if value >= MAX_NUMA_NODES:
        notes.append(
            f"numa_node {_quoted(text)} is beyond Linux's {MAX_NUMA_NODES} NUMA nodes; "
            "treated as no NUMA affinity"
        )
        return None
    return value if value >= 0 else None


def _ports(ports_dir: Path) -> list[Port]:
    ports = []
    for entry in list_dir(ports_dir):
        if not entry.isdigit():
            continue
        port_dir = ports_dir / entry
        _, state = read_code_label(port_dir / "state")
        _, phys = read_code_label(port_dir / "phys_state")
        ports.append(
            Port(
                number=int(entry),
                state=(state or "UNKNOWN").upper(),
                phys_state=phys or "UNKNOWN",
                link_layer=read_text(port_dir / "link_layer") or "UNKNOWN",
                rate=read_text(port_dir / "rate"),
                gids=tuple(_gids(port_dir)),
            )
        )
    return ports


_ZERO_GID = ":".join(["0000"] * 8)


def _gids(port_dir: Path) -> list[Gid]:
    gids = []
    for entry in sorted(list_dir(port_dir / "gids"), key=lambda e: (len(e), e)):
        if not entry.isdigit():
            continue
        value = read_text(port_dir / "gids" / entry)
        if not value or value == _ZERO_GID:
            continue
        gids.append(
            Gid(
                index=int(entry),
                gid=value,
                type=read_text(port_dir / "gid_attrs" / "types" / entry),
                netdev=read_text(port_dir / "gid_attrs" / "ndevs" / entry),
            )
        )
    return gids


def _paired_netdev(
    host: HostRoot, base: Path, guid: bytes | None, netdevs: dict[bytes, str]
) -> str | None:
    """eRDMA: the netdev whose MAC gives our GUID. Others: device/net, then GID ndevs."""
    if guid is not None:
        mac = guids.guid_to_mac(guid)
        if mac is not None and mac in netdevs:
            return netdevs[mac]
    own_net = list_dir(base / "device" / "net")
    if own_net:
        return own_net[0]
    for port in list_dir(base / "ports"):
        ndevs = base / "ports" / port / "gid_attrs" / "ndevs"
        for entry in list_dir(ndevs):
            name = read_text(ndevs / entry)
            if name:
                return name
    return None


def _netdev_macs(host: HostRoot) -> dict[bytes, str]:
    macs: dict[bytes, str] = {}
    for name in list_dir(host.sys / "class" / "net"):
        text = read_text(host.sys / "class" / "net" / name / "address")
        mac = guids.parse_mac(text) if text else None
        if mac and any(mac):
            macs.setdefault(mac, name)
    return macs


def _netdev_mac(host: HostRoot, netdev: str) -> bytes | None:
    text = read_text(host.sys / "class" / "net" / netdev / "address")
    return guids.parse_mac(text) if text else None


def _char_devices_by_ibdev(host: HostRoot) -> dict[str, dict[str, list[CharDevice]]]:
    """uverbs/umad/issm nodes keyed by the RDMA device their `ibdev` file names.

    The index in `uverbsN` is never assumed to match the device name's suffix.
    """
    found: dict[str, dict[str, list[CharDevice]]] = {}
    for cls, kinds in (("infiniband_verbs", ("uverbs",)), ("infiniband_mad", ("umad", "issm"))):
        cls_dir = host.sys / "class" / cls
        for entry in list_dir(cls_dir):
            match = _CHARDEV_NAME.match(entry)
            if match is None or match.group(1) not in kinds:
                continue
            kind = match.group(1)
            ibdev = read_text(cls_dir / entry / "ibdev")
            if not ibdev:
                continue
            char = _char_device(host, f"/dev/infiniband/{entry}", cls_dir / entry / "dev")
            found.setdefault(ibdev, {}).setdefault(kind, []).append(char)
    return found


def _char_device(host: HostRoot, dev_path: str, dev_file: Path) -> CharDevice:
    major = minor = None
    text = read_text(dev_file)
    if text and ":" in text:
        left, _, right = text.partition(":")
        if left.isdigit() and right.isdigit():
            major, minor = int(left), int(right)
    return CharDevice(dev_path, major, minor, present=os.path.exists(host.path(dev_path)))


def _rdma_cm(host: HostRoot) -> CharDevice | None:
    dev_file = host.sys / "class" / "misc" / "rdma_cm" / "dev"
    node = "/dev/infiniband/rdma_cm"
    if not dev_file.exists() and not host.path(node).exists():
        return None
    return _char_device(host, node, dev_file)


def _modules(host: HostRoot) -> ModuleState:
    module = host.sys / "module"
    compat = read_text(module / "erdma" / "parameters" / "compat_mode")
    netns = read_text(module / "ib_core" / "parameters" / "netns_mode")
    return ModuleState(
        erdma_loaded=(module / "erdma").is_dir(),
        compat_mode=None if compat is None else compat.upper() in ("Y", "1"),
        netns_shared=None if netns is None else netns.upper() in ("Y", "1"),
        smc_loaded=(module / "smc").is_dir(),
    )


def _nvidia_gpus(host: HostRoot) -> tuple[Gpu, ...]:
    """NVIDIA GPUs by PCI address, from the nvidia driver's sysfs or /proc/driver/nvidia."""
    bound = [
        e for e in list_dir(host.sys / "bus" / "pci" / "drivers" / "nvidia") if e.count(":") == 2
    ]
    procs = list_dir(host.path("proc", "driver", "nvidia", "gpus"))
    gpus = []
    for address in sorted(set(bound) | set(procs)):
        numa = read_int(host.sys / "bus" / "pci" / "devices" / address / "numa_node")
        valid = numa is not None and 0 <= numa < MAX_NUMA_NODES
        gpus.append(Gpu(address, numa if valid else None))
    return tuple(gpus)
