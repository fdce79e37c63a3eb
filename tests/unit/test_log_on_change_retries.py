"""Retries that fail the same way again log it once: Regular mode's ERdmaDevice watch during an
API outage, a netdev that stays missing, and `retry_until_done` (metrics port, metadata)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any, cast

from erdma.agent.eri_netdevs import RegularExposure
from erdma.agent.regular import follow_devices
from erdma.aio import Backoff, retry_until_done
from erdma.kube import crd
from erdma.kube.client import KubeApi
from tests.unit.regular_support import ERI_A, PRIMARY, Recorder, device_object

log = logging.getLogger("test.retries")


def count(caplog: Any, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


class _Unreachable:
    """An API server that refuses every watch."""

    def __init__(self) -> None:
        self.watches = 0

    async def watch_device(self, name: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        self.watches += 1
        raise OSError("connection refused")
        yield  # pragma: no cover - makes this an async generator


async def test_a_watch_failing_the_same_way_is_logged_once(caplog):
    kube = _Unreachable()
    rec = Recorder()
    api = cast(KubeApi, kube)  # only watch_device is called before the first object
    follow = asyncio.create_task(follow_devices(api, "n1", rec.bring_up, rec.expose))
    await asyncio.sleep(2.0)  # retries at about 0.25, 0.5 and 1 s
    follow.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await follow
    assert kube.watches >= 3
    assert count(caplog, "watching ERdmaDevice n1 failed") == 1


async def test_a_netdev_that_stays_missing_is_logged_once(caplog):
    rec = Recorder(failing={ERI_A.mac})
    exposure = RegularExposure(rec.bring_up, rec.expose, jumbo_mtu=8500)
    dev = device_object([PRIMARY, ERI_A], {PRIMARY.id: crd.READY, ERI_A.id: crd.READY})
    for _ in range(5):
        assert await exposure.apply(dev) is False
    assert count(caplog, "is Ready but its netdev is not up yet") == 1
    rec.failing.clear()
    assert await exposure.apply(dev) is True
    rec.failing.add(ERI_A.mac)  # up, then lost again after it left Ready: a new problem
    await exposure.apply(device_object([PRIMARY, ERI_A], {PRIMARY.id: crd.READY}))
    await exposure.apply(dev)
    assert count(caplog, "is Ready but its netdev is not up yet") == 2


async def test_retry_until_done_logs_each_distinct_failure_once(caplog):
    errors = iter(["busy", "busy", "busy", "gone", "gone"])

    async def step() -> str:
        error = next(errors, None)
        if error is not None:
            raise OSError(error)
        return "done"

    fast = Backoff(initial=0.001, maximum=0.001)
    assert await retry_until_done("serving the thing", step, log, fast) == "done"
    assert count(caplog, "serving the thing failed") == 2
