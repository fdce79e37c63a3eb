"""Fixture host descriptions: what a fake host has, and the catalogue of named variants.

``HostSpec`` (with its ``FakeNetdev`` and ``FakeRdma`` parts) only describes a host;
``erdma.sim.fakehost`` builds the sys/, dev/ and proc/ tree from it. ``variant(name)`` is
the reference eRDMA node (``erdma_node``) changed in one way each, or another kind of node.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class FakeNetdev:
    name: str
    mac: str
    pci: str
    ipv4: tuple[str, ...] = ()
    operstate: str = "up"
    mtu: int = 1500


@dataclass(frozen=True)
class FakeRdma:
    """One RDMA device. `mode` is "iwarp" (erdma default), "roce" (compat/ofed) or "ib"."""

    name: str
    pci: str
    netdev: str
    numa: int | str = 0
    uverbs: int = 0
    driver: str = "erdma"
    vendor: int = 0x1DED
    device: int = 0x107F
    mode: str = "iwarp"
    port_active: bool = True
    fw_ver: str = "0.2.0"
    node_desc: str = "Elastic RDMA Adapter stack"
    mad: bool = False  # umad/issm nodes (IB/RoCE HCAs)


@dataclass(frozen=True)
class HostSpec:
    netdevs: tuple[FakeNetdev, ...]
    rdma: tuple[FakeRdma, ...]
    erdma_loaded: bool = True
    compat_mode: str | None = "N"  # None: upstream driver without the parameter
    netns_mode: str = "Y"
    smc_loaded: bool = True
    rdma_cm: bool = True
    gpus: tuple[tuple[str, int], ...] = ()  # (PCI address, NUMA node)


PRIMARY = FakeNetdev("eth0", "00:16:3e:00:00:01", "0000:00:05.0", ("192.168.0.10/24",))
ETH1 = FakeNetdev("eth1", "00:16:3e:2f:37:75", "0000:00:06.0", ("192.168.4.20/24",))
ETH2 = FakeNetdev("eth2", "00:16:3e:2f:31:11", "0000:80:06.0", ("192.168.5.20/24",))
ERDMA0 = FakeRdma("erdma_0", "0000:00:07.0", "eth1", numa=0, uverbs=0)
ERDMA1 = FakeRdma("erdma_1", "0000:80:07.0", "eth2", numa=1, uverbs=1)


def erdma_node() -> HostSpec:
    """The reference node: two ERIs on NUMA 0 and 1 (eth1/eth2) and a primary eth0 without RDMA."""
    return HostSpec(netdevs=(PRIMARY, ETH1, ETH2), rdma=(ERDMA0, ERDMA1))


def _compat(spec: HostSpec) -> HostSpec:
    return replace(spec, compat_mode="Y", rdma=tuple(replace(d, mode="roce") for d in spec.rdma))


def _gpu(spec: HostSpec) -> HostSpec:
    gpus = tuple(
        (f"0000:{bus:02x}:00.0", 0 if i < 4 else 1)
        for i, bus in enumerate((0x10, 0x11, 0x12, 0x13, 0x90, 0x91, 0x92, 0x93))
    )
    return replace(_compat(spec), gpus=gpus)


def mlx5_hca(index: int, numa: int = 0) -> tuple[FakeNetdev, FakeRdma]:
    """A Mellanox-style HCA: its netdev sits on the same PCI function (device/net/<ifname>)."""
    pci = f"0000:{0x30 + index:02x}:00.0"
    netdev = FakeNetdev(f"ens{index + 1}f0", f"b8:59:9f:00:00:{index:02x}", pci)
    rdma = FakeRdma(
        f"mlx5_{index}",
        pci,
        netdev.name,
        numa=numa,
        uverbs=index,
        driver="mlx5_core",
        vendor=0x15B3,
        device=0x101B,
        mode="roce",
        fw_ver="28.39.1002",
        node_desc=f"node mlx5_{index}",
        mad=True,
    )
    return netdev, rdma


def _mlx5(spec: HostSpec) -> HostSpec:
    netdev, rdma = mlx5_hca(0)
    moved = tuple(replace(d, uverbs=d.uverbs + 1) for d in spec.rdma)
    return replace(spec, netdevs=(*spec.netdevs, netdev), rdma=(rdma, *moved))


def lingjun_node(hcas: int = 4) -> HostSpec:
    """A Lingjun-style GPU node: 8 GPUs and mlx5 HCAs, no eRDMA."""
    pairs = [mlx5_hca(i, numa=0 if i < hcas // 2 else 1) for i in range(hcas)]
    gpus = tuple((f"0000:{0x10 + i:02x}:00.0", 0 if i < 4 else 1) for i in range(8))
    return HostSpec(
        netdevs=(PRIMARY, *(n for n, _ in pairs)),
        rdma=tuple(r for _, r in pairs),
        erdma_loaded=False,
        compat_mode=None,
        gpus=gpus,
    )


VARIANTS = {
    "default": lambda s: s,
    "compat": _compat,
    "port-down": lambda s: replace(s, rdma=tuple(replace(d, port_active=False) for d in s.rdma)),
    "no-numa": lambda s: replace(s, rdma=tuple(replace(d, numa=-1) for d in s.rdma)),
    "uverbs-swapped": lambda s: replace(
        s, rdma=(replace(s.rdma[0], uverbs=1), replace(s.rdma[1], uverbs=0))
    ),
    "no-rdma-cm": lambda s: replace(s, rdma_cm=False),
    "driver-not-loaded": lambda s: replace(s, rdma=(), erdma_loaded=False, rdma_cm=False),
    "mlx5": _mlx5,
    "gpu": _gpu,
    "lingjun": lambda s: lingjun_node(),
}


def variant(name: str) -> HostSpec:
    """A named fixture host; an unknown name lists the known ones."""
    try:
        return VARIANTS[name](erdma_node())
    except KeyError:
        raise ValueError(
            f"unknown fixture host variant {name!r}; known: {', '.join(sorted(VARIANTS))}"
        ) from None
