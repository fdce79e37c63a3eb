"""Regular mode's exposure follows every ERdmaDevice state, netdevs up first."""

from __future__ import annotations

import asyncio

from erdma.agent.eri_netdevs import RegularExposure, ready_devices
from erdma.kube import crd
from tests.unit.regular_support import ERI_A, ERI_B, PRIMARY, Recorder, device_object


def test_only_ready_devices_count():
    dev = device_object([PRIMARY, ERI_A, ERI_B], {PRIMARY.id: crd.READY, ERI_A.id: crd.FAILED})
    assert ready_devices(dev) == [PRIMARY]
    assert ready_devices(None) == []


def test_netdev_up_before_exposure_and_replacement_followed():
    rec = Recorder()
    exposure = RegularExposure(rec.bring_up, rec.expose, jumbo_mtu=8500)
    both = [PRIMARY, ERI_A]
    assert asyncio.run(
        exposure.apply(device_object(both, {PRIMARY.id: crd.READY, ERI_A.id: crd.READY}))
    )
    assert rec.calls == [("up", (ERI_A.mac, 8500)), ("expose", [PRIMARY.mac, ERI_A.mac])]

    rec.calls.clear()  # same state again: no second bring-up, no re-exposure
    asyncio.run(exposure.apply(device_object(both, {PRIMARY.id: crd.READY, ERI_A.id: crd.READY})))
    assert rec.calls == []

    replaced = [PRIMARY, ERI_B]  # ERI A lost; the controller attached B (a new MAC)
    asyncio.run(
        exposure.apply(device_object(replaced, {PRIMARY.id: crd.READY, ERI_B.id: crd.PENDING}))
    )
    assert rec.calls == [("expose", [PRIMARY.mac])]
    asyncio.run(
        exposure.apply(device_object(replaced, {PRIMARY.id: crd.READY, ERI_B.id: crd.READY}))
    )
    assert rec.calls[1:] == [("up", (ERI_B.mac, 8500)), ("expose", [PRIMARY.mac, ERI_B.mac])]

    rec.calls.clear()
    asyncio.run(exposure.apply(None))  # object deleted: nothing exposed
    assert rec.calls == [("expose", [])]


def test_failed_bring_up_hides_only_that_eri_and_is_retried():
    rec = Recorder(failing={ERI_A.mac})
    exposure = RegularExposure(rec.bring_up, rec.expose, jumbo_mtu=8500)
    dev = device_object([PRIMARY, ERI_A], {PRIMARY.id: crd.READY, ERI_A.id: crd.READY})
    assert asyncio.run(exposure.apply(dev)) is False
    assert rec.calls[-1] == ("expose", [PRIMARY.mac])
    rec.failing.clear()  # the netdev appeared
    assert asyncio.run(exposure.apply(dev)) is True
    assert rec.calls[-1] == ("expose", [PRIMARY.mac, ERI_A.mac])
