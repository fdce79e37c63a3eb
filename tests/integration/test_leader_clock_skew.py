"""Lease expiry is measured on the candidate's own clock, never against the holder's renewTime.

A holder on a node whose clock is off writes renewTime values that mean nothing on this node.
The holder here is written by hand (as another replica, or another implementation, would write
it) with its clock an hour behind or an hour ahead, against the real API server, and a
``LeaderElector`` candidate must judge the lease only by when it last saw the record change.
"""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from erdma.kube.leader import LeaderElector
from tests.fakes.kubeapi import KubeApiServer

pytest_plugins = ["tests.integration.conftest_kubeapi"]

NAMESPACE = "kube-system"
DURATION = 2  # leaseDurationSeconds, both for the skewed holder and the candidate
HOUR = datetime.timedelta(hours=1)


@pytest.fixture
async def client(kube_api: KubeApiServer) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    yield client
    await client.close()


async def write_skewed(
    client: AsyncClient, name: str, holder: str, skew: datetime.timedelta
) -> None:
    """Create or renew the Lease as ``holder`` would on a node whose clock is off by ``skew``."""
    now = datetime.datetime.now(datetime.UTC) + skew
    try:
        lease = await client.get(Lease, name, namespace=NAMESPACE)
    except ApiError as exc:
        assert exc.status.code == 404
        spec = LeaseSpec(
            holderIdentity=holder,
            leaseDurationSeconds=DURATION,
            acquireTime=now,
            renewTime=now,
            leaseTransitions=0,
        )
        meta = ObjectMeta(name=name, namespace=NAMESPACE)
        await client.create(Lease(metadata=meta, spec=spec))
        return
    assert lease.spec is not None and lease.spec.holderIdentity == holder, "holder lost the lease"
    lease.spec.renewTime = now
    await client.replace(lease)


async def holder_of(client: AsyncClient, name: str) -> str | None:
    lease = await client.get(Lease, name, namespace=NAMESPACE)
    return lease.spec.holderIdentity if lease.spec else None


async def test_holder_with_clock_far_behind_keeps_lease_while_renewing(client):
    """renewTime an hour in the past, renewed steadily: a candidate must never take over."""
    name = f"skew-{uuid.uuid4().hex[:6]}"
    candidate = LeaderElector(client, NAMESPACE, name, "candidate", duration=DURATION)
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.Event().wait()

    await write_skewed(client, name, "behind", -HOUR)
    standby = asyncio.create_task(candidate.run(work))
    try:
        deadline = time.monotonic() + 3 * DURATION
        while time.monotonic() < deadline:
            await asyncio.sleep(DURATION / 4)
            await write_skewed(client, name, "behind", -HOUR)  # raises if the lease was taken
            assert not started.is_set(), "candidate took a lease that is being renewed"
        assert await holder_of(client, name) == "behind"
        assert not candidate.is_leader
        assert not standby.done()
    finally:
        standby.cancel()
        await asyncio.gather(standby, return_exceptions=True)


async def test_holder_with_clock_far_ahead_loses_lease_after_it_stops(client):
    """renewTime an hour in the future, then silence: taken over after about leaseDuration."""
    name = f"skew-{uuid.uuid4().hex[:6]}"
    candidate = LeaderElector(client, NAMESPACE, name, "candidate", duration=DURATION)
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.Event().wait()

    await write_skewed(client, name, "ahead", HOUR)
    standby = asyncio.create_task(candidate.run(work))
    try:
        for _ in range(4):  # renewed for a while, so the candidate keeps seeing it change
            await asyncio.sleep(DURATION / 4)
            await write_skewed(client, name, "ahead", HOUR)
        stopped = time.monotonic()  # the holder "crashes": no more renewals
        assert not started.is_set()
        await asyncio.wait_for(started.wait(), timeout=60)
        waited = time.monotonic() - stopped
        # Not before the lease ran out on our clock (how soon after is measured nowhere here:
        # a loaded machine only delays it).
        assert waited >= DURATION - 0.2, waited
        assert await holder_of(client, name) == "candidate"
        assert candidate.is_leader
    finally:
        standby.cancel()
        await asyncio.gather(standby, return_exceptions=True)
