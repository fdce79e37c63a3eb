"""Review 12: Regular mode's exposure follows every ERdmaDevice state, netdevs up first."""

from __future__ import annotations

import asyncio

from erdma.agent.eri_netdevs import RegularExposure, ready_devices
from erdma.host.netdev import NetdevError, NetdevResult
from erdma.kube import crd

PRIMARY = crd.DeviceInfo("eni-primary0001", "00:16:3e:00:00:01", "i-1", 0, True)
ERI_A = crd.DeviceInfo("eni-secondary01", "00:16:3e:00:00:0a", "i-1", 1)
ERI_B = crd.DeviceInfo("eni-secondary02", "00:16:3e:00:00:0b", "i-1", 1)


def _dev(devices: list[crd.DeviceInfo], states: dict[str, crd.DeviceState]) -> crd.ERdmaDevice:
    obj = crd.build("n1", "uid-n1", "i-1", devices, jumbo_frame=True)
    obj["status"] = crd.status_body([crd.DeviceStatus(i, s) for i, s in states.items()])
    return crd.parse(obj)


class _Recorder:
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


def test_only_ready_devices_count():
    dev = _dev([PRIMARY, ERI_A, ERI_B], {PRIMARY.id: crd.READY, ERI_A.id: crd.FAILED})
    assert ready_devices(dev) == [PRIMARY]
    assert ready_devices(None) == []


def test_netdev_up_before_exposure_and_replacement_followed():
    rec = _Recorder()
    exposure = RegularExposure(rec.bring_up, rec.expose, jumbo_mtu=8500)
    both = [PRIMARY, ERI_A]
    assert asyncio.run(exposure.apply(_dev(both, {PRIMARY.id: crd.READY, ERI_A.id: crd.READY})))
    assert rec.calls == [("up", (ERI_A.mac, 8500)), ("expose", [PRIMARY.mac, ERI_A.mac])]

    rec.calls.clear()  # same state again: no second bring-up, no re-exposure
    asyncio.run(exposure.apply(_dev(both, {PRIMARY.id: crd.READY, ERI_A.id: crd.READY})))
    assert rec.calls == []

    replaced = [PRIMARY, ERI_B]  # ERI A lost; the controller attached B (a new MAC)
    asyncio.run(exposure.apply(_dev(replaced, {PRIMARY.id: crd.READY, ERI_B.id: crd.PENDING})))
    assert rec.calls == [("expose", [PRIMARY.mac])]
    asyncio.run(exposure.apply(_dev(replaced, {PRIMARY.id: crd.READY, ERI_B.id: crd.READY})))
    assert rec.calls[1:] == [("up", (ERI_B.mac, 8500)),
                             ("expose", [PRIMARY.mac, ERI_B.mac])]  # fmt: skip

    rec.calls.clear()
    asyncio.run(exposure.apply(None))  # object deleted: nothing exposed
    assert rec.calls == [("expose", [])]


def test_failed_bring_up_hides_only_that_eri_and_is_retried():
    rec = _Recorder(failing={ERI_A.mac})
    exposure = RegularExposure(rec.bring_up, rec.expose, jumbo_mtu=8500)
    dev = _dev([PRIMARY, ERI_A], {PRIMARY.id: crd.READY, ERI_A.id: crd.READY})
    assert asyncio.run(exposure.apply(dev)) is False
    assert rec.calls[-1] == ("expose", [PRIMARY.mac])
    rec.failing.clear()  # the netdev appeared
    assert asyncio.run(exposure.apply(dev)) is True
    assert rec.calls[-1] == ("expose", [PRIMARY.mac, ERI_A.mac])
