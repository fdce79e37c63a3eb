"""Which RDMA devices a container gets, which /dev nodes map them, and the env it gets with
them: pure functions of a DeviceSnapshot, shared by `erdma docker args` and `erdma docker run`.

The uverbs node of each device is looked up through discovery (`infiniband_verbs/*/ibdev`),
never guessed from the device name, because `erdma_1` may well be `uverbs0`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import click

from erdma.cdi import device_env
from erdma.host.model import CharDevice, DeviceSnapshot, RdmaDevice


class BadInput(click.ClickException):
    """A bad flag value: one line naming the flag, the value and what is accepted (exit 2,
    as for every command line click itself refuses)."""

    exit_code = 2


class DeviceSelectionError(click.ClickException):
    """The host lacks what was asked for (no device, a missing node); the message says what
    exists. The command line was fine, so exit 1, as for any problem found on the host."""


# -- which devices, which nodes -----------------------------------------------------------
@dataclass(frozen=True)
class Selection:
    """The devices to map, and a note for stderr when the default had to fall back."""

    devices: tuple[RdmaDevice, ...]
    note: str | None = None


def select_devices(snapshot: DeviceSnapshot, names: Sequence[str], root: str = "/") -> Selection:
    """The devices named (in the order given); without names, the eRDMA devices.

    A node with no eRDMA device but other RDMA HCAs (a Lingjun GPU node with mlx5) gets those,
    and the note says so: the user documents' `erdma docker run IMAGE` must still do something
    useful there, but silently mapping other hardware would surprise.
    """
    present = [d.name for d in snapshot.devices]
    if not present:
        hint = "" if snapshot.modules.erdma_loaded else " (the erdma kernel module is not loaded)"
        raise DeviceSelectionError(f"no RDMA devices found under {root}{hint}")
    if not names:
        if snapshot.erdma_devices:
            return Selection(snapshot.erdma_devices)
        note = (
            f"note: no eRDMA device on this host; mapping the other RDMA devices: "
            f"{', '.join(present)} (choose with --device)"
        )
        return Selection(snapshot.devices, note)
    chosen: list[RdmaDevice] = []
    for name in dict.fromkeys(names):
        device = snapshot.by_name(name)
        if device is None:
            raise BadInput(f"unknown --device {name!r}: devices present are {', '.join(present)}")
        chosen.append(device)
    return Selection(tuple(chosen))


@dataclass(frozen=True)
class NodePlan:
    """The char nodes to map (uverbs, then umad/issm, rdma_cm last) and warnings for stderr."""

    nodes: tuple[CharDevice, ...]
    warnings: tuple[str, ...] = ()


def plan_nodes(
    snapshot: DeviceSnapshot, devices: Sequence[RdmaDevice], *, mad: bool = False, root: str = "/"
) -> NodePlan:
    """Which /dev nodes the container gets; a missing uverbs node is an error.

    umad/issm (the management datagram interface: ibstat, the subnet manager) only with `mad`:
    verbs and RDMA-CM workloads never open them, and each one handed out is one more node a
    container could misuse. `rdma_cm` is left out with a warning when /dev lacks it, since
    verbs work without it.
    """
    missing = [d for d in devices if not d.uverbs.present]
    if missing:
        ok = [d.name for d in devices if d.uverbs.present]
        first = missing[0]
        raise DeviceSelectionError(
            f"device {first.name}: its uverbs node {first.uverbs.path} ({first.uverbs.dev}) "
            f"is missing under {root} (is ib_uverbs loaded and udev running?); "
            f"devices with their node: {', '.join(ok) or 'none'}"
        )
    nodes = [d.uverbs for d in devices]
    warnings: list[str] = []
    if mad:
        with_mad = [d for d in devices if d.umad or d.issm]
        if not with_mad:
            raise DeviceSelectionError(
                f"--mad: none of {', '.join(d.name for d in devices)} has umad/issm nodes "
                "(eRDMA and other iWARP devices have none; InfiniBand/RoCE HCAs do)"
            )
        for device in devices:
            if device not in with_mad:
                warnings.append(f"note: {device.name} has no umad/issm nodes; --mad skips it")
        mad_nodes = [c for d in with_mad for c in (*d.umad, *d.issm)]
        absent = [c.path for c in mad_nodes if not c.present]
        if absent:
            raise DeviceSelectionError(
                f"--mad: {', '.join(absent)} missing under {root} (is ib_umad loaded?)"
            )
        nodes.extend(mad_nodes)
    cm = snapshot.rdma_cm
    if cm is not None and cm.present:
        nodes.append(cm)
    elif cm is not None:
        warnings.append(
            f"warning: {cm.path} is missing under {root}; left out (RDMA-CM will not work; "
            "is rdma_ucm loaded?)"
        )
    return NodePlan(tuple(dict.fromkeys(nodes)), tuple(warnings))


def container_env(devices: Sequence[RdmaDevice]) -> dict[str, str]:
    """The env the device plugins give a pod with the same devices: `aliyun/erdma`'s for the
    eRDMA devices (`ERDMA_DEVICES`, `SMCR_PNET`), `rdma/hca`'s `RDMA_DEVICES` for the others,
    so a program reads the same variables in a pod and under `docker run`."""
    env = device_env([d for d in devices if d.is_erdma])
    others = [d.name for d in devices if not d.is_erdma]
    if others:
        env["RDMA_DEVICES"] = ",".join(others)
    return env
