"""`erdma controller` stops promptly and cleanly (exit 0) on SIGTERM, as a rollout or node drain
sends it, and on SIGHUP (a closed terminal), which used to kill it at once.

A standby holds nothing and must not sit out the grace period; a leader releases its Lease on
the way out, so the standby takes over at once instead of after a lease duration, and closes
its connections to the cloud (no "Unclosed client session" from the HTTP client at exit).
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.resources.coordination_v1 import Lease

from bench.chaos.apiserver_faults import ControllerProcess
from tests.fakes.ecs.client import GPU_TWO_CARDS
from tests.fakes.kubeapi import KubeApiServer
from tests.integration.controller_support import add_node, eventually, ready_device

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]


#: the pod's default terminationGracePeriodSeconds: a replica still running then is SIGKILLed
GRACE_PERIOD = 30


async def stopped_in_grace(process: ControllerProcess, sig: signal.Signals) -> int:
    """``sig`` (SIGTERM as the kubelet sends it); the exit code, which must come within the
    grace period (how fast it comes is measured in bench/, not asserted here)."""
    assert process.process is not None
    process.process.send_signal(sig)
    return await asyncio.wait_for(process.process.wait(), GRACE_PERIOD)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
async def test_standby_and_leader_stop_promptly(
    kube_api: KubeApiServer, emu, k8s: AsyncClient, tmp_path: Path, sig: signal.Signals
):
    first = ControllerProcess(tmp_path / "a", kube_api.kubeconfig, emu.endpoint)
    second = ControllerProcess(tmp_path / "b", kube_api.kubeconfig, emu.endpoint)
    for replica in (first, second):
        replica.work.mkdir()
    first.lease_name = second.lease_name
    client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    try:
        await first.start()
        await eventually(first.leading, timeout=60)
        node = await add_node(k8s, emu.world.add_instance(GPU_TWO_CARDS.name))
        await eventually(lambda: ready_device(k8s, node), timeout=60)  # the leader called ECS
        await second.start()
        await eventually(second.health, timeout=60)
        assert not await second.leading()
        assert await stopped_in_grace(second, sig) == 0  # the standby
        lease = await client.get(Lease, first.lease_name, namespace="default")
        assert lease.spec is not None and lease.spec.holderIdentity
        assert await stopped_in_grace(first, sig) == 0  # the leader
        lease = await client.get(Lease, first.lease_name, namespace="default")
        assert lease.spec is not None and not lease.spec.holderIdentity, "lease not released"
        for replica in (first, second):
            log = (replica.work / "controller.log").read_text()
            assert "Traceback" not in log and "must run forever" not in log, log[-2000:]
            assert "Unclosed client session" not in log, log[-2000:]
    finally:
        await first.stop()
        await second.stop()
        await client.close()
