"""Leader election on a coordination.k8s.io Lease, so two controller replicas never both act.

Only the leader talks to ECS: two replicas attaching the same ERI would race. A standby retries
every ``duration / 3`` and takes over once the leader's lease has expired (or was released on a
clean shutdown, which makes failover immediate). A leader that cannot renew within the lease
duration stops its work before anyone else can acquire the lease.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

log = logging.getLogger(__name__)


class LeadershipLost(RuntimeError):
    """The lease could not be renewed in time; the work was stopped."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class LeaderElector:
    """Acquire, renew and release one Lease for ``identity``."""

    def __init__(
        self,
        client: AsyncClient,
        namespace: str,
        name: str,
        identity: str,
        duration: float = 15.0,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration
        self.is_leader = False
        self.last_renew = _now()

    async def try_acquire(self) -> bool:
        """One attempt to take or renew the lease; True when we hold it afterwards."""
        now = _now()
        seconds = max(1, round(self.duration))
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            spec = LeaseSpec(
                holderIdentity=self.identity,
                leaseDurationSeconds=seconds,
                acquireTime=now,
                renewTime=now,
                leaseTransitions=0,
            )
            lease = Lease(metadata=ObjectMeta(name=self.name, namespace=self.namespace), spec=spec)
            return await self._write(self.client.create(lease), now)
        spec = lease.spec or LeaseSpec()
        holder = spec.holderIdentity or ""
        renewed = spec.renewTime or spec.acquireTime
        held_for = spec.leaseDurationSeconds or seconds
        expired = renewed is None or now - renewed > datetime.timedelta(seconds=held_for)
        if holder and holder != self.identity and not expired:
            self.is_leader = False
            return False
        if holder != self.identity:
            spec.acquireTime = now
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
        spec.holderIdentity = self.identity
        spec.leaseDurationSeconds = seconds
        spec.renewTime = now
        lease.spec = spec
        return await self._write(self.client.replace(lease), now)

    async def _write(self, call: Awaitable[object], now: datetime.datetime) -> bool:
        try:
            await call
        except ApiError as exc:
            if exc.status.code == 409:  # another replica wrote first
                self.is_leader = False
                return False
            raise
        if not self.is_leader:
            log.info("became leader on lease %s/%s as %s", self.namespace, self.name, self.identity)
        self.is_leader = True
        self.last_renew = now
        return True

    async def release(self) -> None:
        """Give the lease up so a standby takes over at once; best effort."""
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
            if lease.spec and lease.spec.holderIdentity == self.identity:
                lease.spec.holderIdentity = None
                lease.spec.renewTime = None
                await self.client.replace(lease)
        except ApiError as exc:
            log.warning("could not release lease %s: %s", self.name, exc)

    async def run(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Wait for leadership, run ``work`` while renewing; raise ``LeadershipLost`` if lost."""
        interval = self.duration / 3
        while not await self._attempt():
            await asyncio.sleep(interval)
        task = asyncio.create_task(work())
        try:
            while not task.done():
                done, _ = await asyncio.wait({task}, timeout=interval)
                if done:
                    break
                if await self._attempt():
                    continue
                overdue = _now() - self.last_renew > datetime.timedelta(
                    seconds=self.duration * 2 / 3
                )
                if not self.is_leader or overdue:
                    task.cancel()
                    raise LeadershipLost(f"lease {self.namespace}/{self.name} not renewed")
            task.result()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            await self.release()

    async def _attempt(self) -> bool:
        try:
            return await self.try_acquire()
        except (ApiError, OSError) as exc:
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return False
