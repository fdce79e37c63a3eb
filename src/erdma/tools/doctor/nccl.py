"""Doctor check: do NCCL_IB_HCA and NCCL_IB_GID_INDEX fit the devices this host has?

NCCL silently falls back to TCP sockets when NCCL_IB_HCA matches nothing, and a GID index that
is not RoCE v2 on every device makes connections hang; both are cheap to see up front.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from erdma.host.model import RdmaDevice
from erdma.tools.doctor.model import DoctorContext, Outcome, Verdict, check

ROCE_V2 = "RoCE v2"


@dataclass(frozen=True)
class HcaFilter:
    """NCCL_IB_HCA: `[^][=]name[:port],...`: exclude with ^, exact names with =, else prefixes."""

    exclude: bool
    exact: bool
    entries: tuple[tuple[str, int | None], ...]

    @classmethod
    def parse(cls, value: str) -> HcaFilter:
        text = value.strip()
        exclude = text.startswith("^")
        text = text.removeprefix("^")
        exact = text.startswith("=")
        text = text.removeprefix("=")
        entries = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, _, port = part.partition(":")
            if port and not port.isdigit():
                raise ValueError(
                    f"NCCL_IB_HCA={value!r}: port {port!r} of {part!r} is not a number "
                    "(expected name[:port], e.g. erdma_0:1)"
                )
            entries.append((name, int(port) if port else None))
        return cls(exclude, exact, tuple(entries))

    def _matches(self, device: RdmaDevice) -> bool:
        for name, port in self.entries:
            hit = device.name == name if self.exact else device.name.startswith(name)
            if hit and (port is None or any(p.number == port for p in device.ports)):
                return True
        return False

    def select(self, devices: Sequence[RdmaDevice]) -> list[RdmaDevice]:
        return [d for d in devices if self._matches(d) != self.exclude]


def _roce_v2_indexes(device: RdmaDevice) -> list[int]:
    return [g.index for p in device.ports for g in p.gids if g.type == ROCE_V2 and g.ipv4]


def _gid_problem(device: RdmaDevice, index: int) -> str | None:
    gids = {g.index: g for p in device.ports for g in p.gids}
    gid = gids.get(index)
    if gid is not None and gid.type == ROCE_V2:
        return None
    good = _roce_v2_indexes(device)
    if not good:
        return f"{device.name} has no RoCE v2 GIDs (iWARP mode?): NCCL needs compat mode"
    seen = f"is {gid.type or 'untyped'}" if gid is not None else "is empty"
    return (
        f"{device.name} GID {index} {seen}; its IPv4 RoCE v2 GIDs are at "
        f"{', '.join(map(str, good))}"
    )


@check("nccl-env", "NCCL environment")
def nccl_env(ctx: DoctorContext) -> Outcome:
    hca_value = ctx.environ.get("NCCL_IB_HCA")
    gid_value = ctx.environ.get("NCCL_IB_GID_INDEX")
    if hca_value is None and gid_value is None:
        return Outcome(Verdict.SKIP, "NCCL_IB_HCA and NCCL_IB_GID_INDEX are not set")
    devices = list(ctx.snapshot.devices)
    if not devices:
        return Outcome(
            Verdict.FAIL,
            "NCCL_IB_* is set but there are no RDMA devices: NCCL would fall back to TCP",
            "pass the eRDMA devices to this container (aliyun/erdma, erdma docker args)",
        )
    present = ", ".join(d.name for d in devices)
    selected = devices
    notes = []
    if hca_value is not None:
        try:
            selected = HcaFilter.parse(hca_value).select(devices)
        except ValueError as exc:
            return Outcome(Verdict.FAIL, str(exc), "fix NCCL_IB_HCA")
        if not selected:
            return Outcome(
                Verdict.FAIL,
                f"NCCL_IB_HCA={hca_value!r} selects no device (present: {present}); "
                "NCCL would fall back to TCP",
                f"set NCCL_IB_HCA to device names present here, e.g. ={present}",
            )
        notes.append(f"NCCL_IB_HCA={hca_value!r} selects {', '.join(d.name for d in selected)}")
    if gid_value is not None:
        try:
            index = int(gid_value)
        except ValueError:
            return Outcome(
                Verdict.FAIL,
                f"NCCL_IB_GID_INDEX={gid_value!r} is not an integer",
                "set a GID index (1 on eRDMA in compat mode) or -1 for automatic selection",
            )
        if index >= 0:
            problems = [p for d in selected if (p := _gid_problem(d, index)) is not None]
            if problems:
                return Outcome(
                    Verdict.FAIL,
                    f"NCCL_IB_GID_INDEX={index}: " + "; ".join(problems),
                    "use the index shown, or NCCL_IB_GID_INDEX=-1 with NCCL_IB_ADDR_FAMILY=AF_INET",
                )
            notes.append(f"GID {index} is RoCE v2 on {', '.join(d.name for d in selected)}")
        else:
            notes.append("NCCL_IB_GID_INDEX=-1 lets NCCL choose")
    return Outcome(Verdict.PASS, "; ".join(notes))
