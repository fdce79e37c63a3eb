"""`erdma controller` stops promptly on SIGTERM, as a rollout or node drain sends it.

A standby holds nothing and must not sit out the grace period; a leader releases its Lease on
the way out, so the standby takes over at once instead of after a lease duration.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from lightkube import AsyncClient, KubeConfig
from lightkube.resources.coordination_v1 import Lease

from bench.chaos.apiserver_faults import ControllerProcess
from tests.fakes.kubeapi import KubeApiServer
from tests.integration.controller_support import eventually

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]


async def stopped_within(process: ControllerProcess, seconds: float) -> float:
    assert process.process is not None
    started = time.monotonic()
    process.process.terminate()
    await asyncio.wait_for(process.process.wait(), seconds)
    return time.monotonic() - started


async def test_standby_and_leader_stop_promptly(kube_api: KubeApiServer, emu, tmp_path: Path):
    first = ControllerProcess(tmp_path / "a", kube_api.kubeconfig, emu.endpoint)
    second = ControllerProcess(tmp_path / "b", kube_api.kubeconfig, emu.endpoint)
    for replica in (first, second):
        replica.work.mkdir()
    first.lease_name = second.lease_name
    client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    try:
        await first.start()
        await eventually(first.leading, timeout=60)
        await second.start()
        await eventually(second.health, timeout=60)
        assert not await second.leading()
        assert await stopped_within(second, 5) < 5  # the standby
        lease = await client.get(Lease, first.lease_name, namespace="default")
        assert lease.spec is not None and lease.spec.holderIdentity
        await stopped_within(first, 10)  # the leader
        lease = await client.get(Lease, first.lease_name, namespace="default")
        assert lease.spec is not None and not lease.spec.holderIdentity, "lease not released"
    finally:
        await first.stop()
        await second.stop()
        await client.close()
