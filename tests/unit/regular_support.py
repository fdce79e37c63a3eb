"""ERdmaDevice objects and a recording netdev/exposure backend for Regular-mode unit tests."""

from __future__ import annotations

from erdma.host.netdev import NetdevError, NetdevResult
from erdma.kube import crd

PRIMARY = crd.DeviceInfo("eni-primary0001", "00:16:3e:00:00:01", "i-1", 0, True)
ERI_A = crd.DeviceInfo("eni-secondary01", "00:16:3e:00:00:0a", "i-1", 1)
ERI_B = crd.DeviceInfo("eni-secondary02", "00:16:3e:00:00:0b", "i-1", 1)


def device_object(
    devices: list[crd.DeviceInfo], states: dict[str, crd.DeviceState]
) -> crd.ERdmaDevice:
    obj = crd.build("n1", "uid-n1", "i-1", devices, jumbo_frame=True)
    obj["status"] = crd.status_body([crd.DeviceStatus(i, s) for i, s in states.items()])
    return crd.parse(obj)


class Recorder:
    """Records each netdev bring-up (failing for MACs in ``failing``) and each exposure."""

    def __init__(self, failing: set[str] | None = None) -> None:
        self.calls: list[tuple[str, object]] = []
        self.failing = failing or set()

    async def bring_up(self, d: crd.DeviceInfo, mtu: int | None) -> NetdevResult:
        if d.mac in self.failing:
            self.calls.append(("failed", d.mac))
            raise NetdevError(f"no network device with MAC {d.mac}")
        self.calls.append(("up", (d.mac, mtu)))
        return NetdevResult("eth9", "configured")

    def expose(self, macs: frozenset[str]) -> None:
        self.calls.append(("expose", sorted(macs)))
