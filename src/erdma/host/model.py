"""What discovery finds: immutable snapshots of the node's RDMA devices.

Everything downstream (device plugins, `erdma devices`, CDI, doctor) reads these objects and
never sysfs itself, so one scan gives one consistent view.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ERDMA_DRIVER = "erdma"
ALIBABA_VENDOR_ID = 0x1DED


@dataclass(frozen=True)
class CharDevice:
    """A character device a container needs, e.g. /dev/infiniband/uverbs0 (231:192)."""

    path: str
    major: int | None
    minor: int | None
    present: bool

    @property
    def dev(self) -> str:
        return f"{self.major}:{self.minor}" if self.major is not None else "?"


@dataclass(frozen=True)
class Gid:
    index: int
    gid: str
    type: str | None = None
    netdev: str | None = None

    @property
    def ipv4(self) -> str | None:
        """The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), else None."""
        groups = self.gid.split(":")
        if len(groups) != 8 or any(g != "0000" for g in groups[:5]) or groups[5] != "ffff":
            return None
        hi, lo = int(groups[6], 16), int(groups[7], 16)
        return f"{hi >> 8}.{hi & 0xFF}.{lo >> 8}.{lo & 0xFF}"


@dataclass(frozen=True)
class Port:
    number: int
    state: str  # ACTIVE, DOWN, INIT, ARMED, ... ; "UNKNOWN" when unreadable
    phys_state: str
    link_layer: str
    rate: str | None = None
    gids: tuple[Gid, ...] = ()

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"


@dataclass(frozen=True)
class RdmaDevice:
    """One RDMA device (`erdma_0`, `mlx5_0`) with everything a container or a person needs."""

    name: str
    driver: str | None
    pci_address: str | None
    vendor_id: int | None
    device_id: int | None
    node_guid: str | None
    node_type: str | None  # "RNIC" (iWARP) or "CA" (IB/RoCE-style)
    fw_ver: str | None
    node_desc: str | None
    numa_node: int | None  # None: no affinity (sysfs -1) or unreadable
    netdev: str | None
    mac: str | None
    pnetid: str | None
    ports: tuple[Port, ...]
    uverbs: CharDevice
    umad: tuple[CharDevice, ...] = ()
    issm: tuple[CharDevice, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def is_erdma(self) -> bool:
        return self.driver == ERDMA_DRIVER or self.vendor_id == ALIBABA_VENDOR_ID

    @property
    def active(self) -> bool:
        return any(port.active for port in self.ports)

    @property
    def char_devices(self) -> tuple[CharDevice, ...]:
        return (self.uverbs, *self.umad, *self.issm)


@dataclass(frozen=True)
class ModuleState:
    """Kernel modules as sysfs shows them."""

    erdma_loaded: bool
    compat_mode: bool | None  # /sys/module/erdma/parameters/compat_mode; None: upstream driver
    netns_shared: bool | None  # ib_core netns_mode; None: unknown
    smc_loaded: bool


@dataclass(frozen=True)
class Skipped:
    """A device discovery kept out, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class Gpu:
    """An NVIDIA GPU, for GPU/NIC NUMA affinity."""

    pci_address: str
    numa_node: int | None


@dataclass(frozen=True)
class DeviceSnapshot:
    devices: tuple[RdmaDevice, ...]
    skipped: tuple[Skipped, ...]
    rdma_cm: CharDevice | None
    modules: ModuleState
    gpus: tuple[Gpu, ...] = field(default=())

    def by_name(self, name: str) -> RdmaDevice | None:
        return next((d for d in self.devices if d.name == name), None)

    @property
    def erdma_devices(self) -> tuple[RdmaDevice, ...]:
        return tuple(d for d in self.devices if d.is_erdma)
