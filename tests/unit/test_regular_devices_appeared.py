"""ECS may call an ERI in use before the node's kernel shows it: the agent then finds the ERI
Ready without a netdev. When its rescan finds the new device, the bring-up is retried at once,
not at the next backoff step."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

from erdma.agent.regular import follow_devices
from erdma.aio import Backoff
from erdma.kube import crd
from erdma.kube.client import KubeApi
from tests.unit.regular_support import ERI_A, PRIMARY, Recorder

#: a retry ladder far slower than the test, so only the cue can bring the ERI up in time
SLOW_RETRY = Backoff(initial=60.0, maximum=60.0)


class _OneObject:
    """An API server whose watch delivers one ERdmaDevice, both devices Ready, then idles."""

    async def watch_device(self, name: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        obj = crd.build(name, "uid-n1", "i-1", [PRIMARY, ERI_A], jumbo_frame=False)
        ready = [crd.DeviceStatus(d.id, crd.READY) for d in (PRIMARY, ERI_A)]
        obj["status"] = crd.status_body(ready)
        yield "ADDED", obj
        await asyncio.Event().wait()


def _follow(rec: Recorder, appeared: asyncio.Event) -> asyncio.Task[None]:
    api = cast(KubeApi, _OneObject())  # only watch_device is called
    return asyncio.create_task(
        follow_devices(
            api, "n1", rec.bring_up, rec.expose, retry=SLOW_RETRY, devices_appeared=appeared
        )
    )


async def _exposed(rec: Recorder, macs: list[str]) -> None:
    while ("expose", macs) not in rec.calls:
        await asyncio.sleep(0.01)


async def test_a_device_appearing_retries_the_missing_netdev_at_once() -> None:
    rec = Recorder(failing={ERI_A.mac})
    appeared = asyncio.Event()
    follow = _follow(rec, appeared)
    try:
        await asyncio.wait_for(_exposed(rec, [PRIMARY.mac]), 5)  # the primary alone meanwhile
        rec.failing.clear()  # the kernel shows the ERI; the rescan says so
        appeared.set()
        await asyncio.wait_for(_exposed(rec, sorted([PRIMARY.mac, ERI_A.mac])), 5)
    finally:
        follow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follow
    assert rec.calls.count(("failed", ERI_A.mac)) == 1


async def test_devices_appearing_while_nothing_is_pending_change_nothing() -> None:
    rec = Recorder()
    appeared = asyncio.Event()
    follow = _follow(rec, appeared)
    try:
        await asyncio.wait_for(_exposed(rec, sorted([PRIMARY.mac, ERI_A.mac])), 5)
        calls = list(rec.calls)
        appeared.set()
        await asyncio.sleep(0.2)
        assert rec.calls == calls  # no bring-up again, no new exposure
    finally:
        follow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follow
