"""Leader election on a coordination.k8s.io Lease, so two controller replicas never both act.

Only the leader talks to ECS: two replicas attaching the same ERI would race. The rules are
client-go's ``leaderelection``, so that mixed or skewed replicas agree:

* Expiry is measured on the candidate's own monotonic clock from the moment it last saw the Lease
  record change (``observedTime``); the holder's ``renewTime`` only tells that it changed. Nodes'
  wall clocks may disagree by more than the lease duration, so comparing them would let a standby
  take a lease that is being renewed (holder behind) or never take a dead one (holder ahead).
* A leader renews every ``retry_period`` with one write of the Lease its last write returned
  (no read: a read and a write per renew left a 15 s lease room for only ~2 s per request),
  each request bounded by ``request_timeout`` so that a hung one leaves room for another try
  before the deadline. A failed renew (API server down, 5xx, timeout) is
  logged once per distinct error and retried; the leader keeps working until ``renew_deadline``
  has passed since the start of its last successful renew, then stops its work and stands by to
  acquire again. ``renew_deadline < duration`` is what makes this safe: a standby waits the full
  ``duration`` after it saw that renew, so the old leader has stopped before anyone takes over.
* A clean shutdown releases the lease, so a standby takes over at once.

Give the elector a client of its own (`erdma.controller.main` does): requests of other work
queued in a shared connection pool would delay renews behind them.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import math
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import httpx2
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

log = logging.getLogger(__name__)
T = TypeVar("T")

# What one failed attempt can raise: every httpx error (ApiError is an HTTPStatusError, connect
# and read errors are TransportErrors) and OSError, which includes the TimeoutError of a deadline.
_API_ERRORS = (httpx2.HTTPError, OSError)


class LeadershipLost(RuntimeError):
    """The work did not stop in time after leadership was lost (`LeaderElector.run` raises it);
    a lost lease alone is not an error: ``run`` stands by and acquires again."""


def _wall_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _check(key: str, value: float, ok: bool, accepted: str) -> None:
    if not ok or not math.isfinite(value):
        raise ValueError(f"leader election: {key}={value!r} is invalid; accepted: {accepted}")


class LeaderElector:
    """Acquire, renew and release one Lease for ``identity``.

    ``duration`` is the lease duration written to the Lease (``leaseDurationSeconds``, rounded up
    to whole seconds). ``renew_deadline`` and ``retry_period`` default to client-go's proportions
    (15 s / 10 s / 2 s): two thirds and two fifteenths of ``duration``.
    """

    def __init__(
        self,
        client: AsyncClient,
        namespace: str,
        name: str,
        identity: str,
        duration: float = 15.0,
        *,
        renew_deadline: float | None = None,
        retry_period: float | None = None,
    ) -> None:
        renew_deadline = duration * 2 / 3 if renew_deadline is None else renew_deadline
        retry_period = duration * 2 / 15 if retry_period is None else retry_period
        _check("duration (leaseDurationSeconds)", duration, duration > 0, "seconds > 0")
        _check(
            "renew_deadline",
            renew_deadline,
            0 < renew_deadline < duration,
            f"0 < renew_deadline < duration ({duration!r}), so a leader stops before it expires",
        )
        _check(
            "retry_period",
            retry_period,
            0 < retry_period < renew_deadline,
            f"0 < retry_period < renew_deadline ({renew_deadline!r}), so a renew can be retried",
        )
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        #: bound of one request: two tries and the pause between them fit in the renew deadline
        self.request_timeout = (renew_deadline - retry_period) / 2
        #: True while this replica's work runs: set when it starts, cleared only once a lost
        #: leadership's work has been cancelled and awaited, so whoever reads it (``/healthz``,
        #: a test) never sees "not leader" while the work still runs.
        self.is_leader = False
        self._holds = False  # the Lease is ours as far as the last attempt knows
        self.last_renew = 0.0  # monotonic start of the last successful acquire/renew
        #: monotonic time the API server last answered an attempt (held or not): readiness
        self.last_answer = time.monotonic()
        self._written: Lease | None = None  # the Lease as our last write returned it
        self._observed: dict[str, Any] | None = None  # the Lease spec as last seen
        self._observed_at = 0.0  # monotonic time it was first seen in that state
        self._errors: set[str] = set()  # distinct errors logged since the last answer

    def _observe(self, spec: LeaseSpec) -> None:
        record = spec.to_dict()
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()

    async def _call(self, request: Coroutine[Any, Any, T]) -> T:
        """One API request, bounded by ``request_timeout`` (TimeoutError, an OSError)."""
        async with asyncio.timeout(self.request_timeout):
            return await request

    async def try_acquire(self) -> bool:
        """One attempt to take or renew the lease; True when we hold it afterwards.

        A holder renews by writing the Lease its last write returned; everyone else reads it
        first. Raises what the API raises, except 404 on read (the Lease is created) and 409 on
        write (someone else wrote since: False, and the next attempt reads). An error does not
        end holding the lease: whether it ends leadership depends on the renew deadline, which
        ``run`` tracks.
        """
        started, now = time.monotonic(), _wall_now()
        if self._holds and self._written is not None and self._written.spec is not None:
            self._written.spec.renewTime = now
            return await self._write(self._written, started, create=False)
        seconds = math.ceil(self.duration)
        try:
            lease = await self._call(self.client.get(Lease, self.name, namespace=self.namespace))
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
            meta = ObjectMeta(name=self.name, namespace=self.namespace)
            return await self._write(Lease(metadata=meta, spec=spec), started, create=True)
        spec = lease.spec or LeaseSpec()
        self._observe(spec)
        holder = spec.holderIdentity or ""
        if holder and holder != self.identity:
            held_for = spec.leaseDurationSeconds or seconds
            if time.monotonic() < self._observed_at + held_for:
                self._holds = False
                return False
        if holder != self.identity:
            spec.acquireTime = now
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
        spec.holderIdentity = self.identity
        spec.leaseDurationSeconds = seconds
        spec.renewTime = now  # only so that others see a change; nobody compares it to a clock
        lease.spec = spec
        return await self._write(lease, started, create=False)

    async def _write(self, lease: Lease, started: float, *, create: bool) -> bool:
        self._written = None  # until this write answers, nothing to renew from
        try:
            request = self.client.create(lease) if create else self.client.replace(lease)
            written = await self._call(request)
        except ApiError as exc:
            if exc.status.code == 409:  # another replica wrote first; the next read tells who
                return False
            raise
        self._written = written
        self._observe(written.spec or LeaseSpec())
        self._holds = True
        self.last_renew = started
        return True

    async def release(self) -> None:
        """Give the lease up so a standby takes over at once; best effort, bounded in time."""
        if not self._holds:
            return
        self._holds = False
        try:
            async with asyncio.timeout(self.renew_deadline):
                lease = await self.client.get(Lease, self.name, namespace=self.namespace)
                if lease.spec and lease.spec.holderIdentity == self.identity:
                    lease.spec.holderIdentity = None
                    lease.spec.renewTime = None
                    await self.client.replace(lease)
        except _API_ERRORS as exc:
            log.warning("could not release lease %s/%s: %r", self.namespace, self.name, exc)

    async def run(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Lead whenever possible: run ``work()`` while leader, renewing the lease meanwhile.

        If leadership is lost (the renew deadline passed, or another replica holds the lease)
        ``work`` is cancelled and the elector goes back to acquiring; ``work()`` is called again
        on the next acquisition. Returns when ``work`` returns, raises what ``work`` raises, and
        releases the lease on the way out (also when cancelled). API errors never escape.
        """
        try:
            while True:
                while not await self._attempt(self.renew_deadline):
                    await asyncio.sleep(self.retry_period)
                task = asyncio.create_task(work())
                self.is_leader = True
                try:
                    lost = await self._hold(task)
                finally:
                    await self._stop_work(task)
                    self.is_leader = False
                if not lost:
                    task.result()
                    return
                log.warning(
                    "lost leadership of lease %s/%s (%s); work stopped, trying to acquire again",
                    self.namespace,
                    self.name,
                    lost,
                )
        finally:
            await self.release()

    async def _stop_work(self, task: asyncio.Task[None]) -> None:
        """Cancel ``work`` and wait for it, at most ``duration - renew_deadline``: after that a
        standby may take the lease, so work still running then raises `LeadershipLost` (the
        controller exits on purpose rather than act beside the next leader)."""
        if task.done():
            return
        task.cancel()
        bound = self.duration - self.renew_deadline
        done, _ = await asyncio.wait({task}, timeout=bound)
        if not done:
            raise LeadershipLost(
                f"lease {self.namespace}/{self.name}: the work did not stop within {bound:.3g}s "
                "of losing leadership; exiting so that two leaders never act at once"
            )
        if not task.cancelled() and task.exception() is not None:
            log.warning("work ended with %r while being stopped", task.exception())

    async def _hold(self, task: asyncio.Task[None]) -> str:
        """Renew every retry period until ``task`` ends (""), or return why leadership ended."""
        while True:
            deadline = self.last_renew + self.renew_deadline
            pause = min(self.retry_period, deadline - time.monotonic())
            await asyncio.wait({task}, timeout=max(0.0, pause))
            if task.done():
                return ""
            left = deadline - time.monotonic()
            if left <= 0:
                self._holds = False
                return f"not renewed for {self.renew_deadline:.3g}s"
            if not await self._attempt(left) and not self._holds:
                return "held by another replica"

    async def _attempt(self, timeout: float) -> bool:
        """``try_acquire`` within ``timeout``; an API error is logged (once per kind) as False."""
        was_leader = self._holds
        try:
            async with asyncio.timeout(timeout):
                ok = await self.try_acquire()
        except _API_ERRORS as exc:
            key = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if key not in self._errors:
                self._errors.add(key)
                log.warning(
                    "lease %s/%s: attempt failed: %s (retrying every %.3gs; logged once until "
                    "the API answers)",
                    self.namespace,
                    self.name,
                    key,
                    self.retry_period,
                )
            return False
        self.last_answer = time.monotonic()
        if self._errors:
            log.info("lease %s/%s: API server answers again", self.namespace, self.name)
            self._errors.clear()
        if ok and not was_leader:
            log.info("became leader on lease %s/%s as %s", self.namespace, self.name, self.identity)
        return ok
