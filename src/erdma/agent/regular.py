"""Agent side of Regular mode: follow this Node's ERdmaDevice, configure and expose its ERIs.

The controller creates and attaches the ERIs asynchronously; the agent must not look for the
devices before ECS has attached them. The reference agent read the ERdmaDevice once a minute,
ignored its status and crashed until the attach landed. Here the agent watches the object (one
long-lived request, no polling) and logs progress ("1/2 Ready, eni-x Pending: attaching").

The watch never ends (`follow_devices`): the controller replaces a lost ERI with a new one (a
new MAC) and one card may fail while the others work, so every change re-computes what is
exposed: exactly the devices whose status is Ready, each secondary ERI's netdev brought up
first with the address the VPC assigned (from instance metadata; the primary ENI belongs to
the OS). `prepare_regular_mode` is the one-shot form (wait for all Ready, configure) used by
the netdev bring-up test.
"""

from __future__ import annotations

import asyncio
import logging

import httpx2 as httpx
from lightkube.core.exceptions import ApiError

from erdma.agent.eri_netdevs import (
    DEFAULT_JUMBO_MTU,
    BringUp,
    Expose,
    RegularExposure,
)
from erdma.aio import Backoff
from erdma.host.metadata import MetadataClient
from erdma.host.netdev import NetdevResult, configure_eri_netdev
from erdma.kube import crd
from erdma.kube.client import KubeApi

log = logging.getLogger(__name__)


def describe_progress(dev: crd.ERdmaDevice) -> str:
    """One line for the log: how many devices are Ready and what the others wait for."""
    ready = 0
    waiting = []
    for d in dev.devices:
        st = dev.status_of(d.id)
        if st is not None and st.status == crd.READY:
            ready += 1
            continue
        state = st.status if st else "no status yet"
        waiting.append(f"{d.id} {state}" + (f": {st.message}" if st and st.message else ""))
    return f"{ready}/{len(dev.devices)} Ready" + (f"; {'; '.join(waiting)}" if waiting else "")


def _watch_failed(node_name: str, exc: Exception, last: str) -> str:
    """Log a failed watch unless it failed the same way the last time (an API outage would
    otherwise log at every retry); returns the failure to compare the next one with."""
    failure = f"{type(exc).__name__}: {exc}"
    if failure != last:
        log.warning(
            "watching ERdmaDevice %s failed (%s); retrying, logged again if the error changes",
            node_name,
            exc,
        )
    return failure


async def wait_for_devices(
    kube: KubeApi, node_name: str, backoff: Backoff | None = None
) -> crd.ERdmaDevice:
    """Watch ERdmaDevice ``node_name`` until all its devices are Ready, and return it.

    API errors and dropped watches are logged and the watch is re-established, quickly at
    first (an API server answers 429 while its watch cache for a new CRD warms up), then at a
    `Backoff` pace up to 5 s; the function returns only with a Ready object (cancel to give up).
    """
    last = failure = ""
    backoff = backoff or Backoff(initial=0.25, maximum=5.0)
    log.info("waiting for ERdmaDevice %s to be created and Ready", node_name)
    while True:
        try:
            async for kind, obj in kube.watch_device(node_name):
                failure = ""
                if kind == "DELETED":
                    log.info("ERdmaDevice %s was deleted; waiting for it to come back", node_name)
                    continue
                try:
                    dev = crd.parse(obj)
                except crd.CrdError as exc:
                    log.error("ignoring malformed ERdmaDevice: %s", exc)
                    continue
                if dev.all_ready:
                    log.info("ERdmaDevice %s: %s", node_name, describe_progress(dev))
                    return dev
                progress = describe_progress(dev)
                if progress != last:
                    log.info("ERdmaDevice %s: %s", node_name, progress)
                    last = progress
        except (ApiError, httpx.HTTPError, OSError) as exc:
            failure = _watch_failed(node_name, exc, failure)
        await asyncio.sleep(backoff.next_delay())


async def configure_netdevs(
    dev: crd.ERdmaDevice,
    metadata: MetadataClient,
    jumbo_mtu: int = DEFAULT_JUMBO_MTU,
    netns: str | None = None,
) -> list[NetdevResult]:
    """Bring up the netdev of every secondary ERI of ``dev``; raises on the first failure."""
    mtu = jumbo_mtu if dev.jumbo_frame else None
    results = []
    for d in dev.devices:
        if d.is_primary_eni:
            log.info("%s (%s) is the primary ENI; its netdev is left to the OS", d.id, d.mac)
            continue
        net = await metadata.eni_network(d.mac)
        results.append(await asyncio.to_thread(configure_eri_netdev, d.mac, net, mtu, netns))
    return results


async def prepare_regular_mode(
    kube: KubeApi,
    node_name: str,
    metadata: MetadataClient,
    jumbo_mtu: int = DEFAULT_JUMBO_MTU,
    netns: str | None = None,
) -> crd.ERdmaDevice:
    """Wait until the Node's ERIs are Ready, configure their netdevs, return the object."""
    dev = await wait_for_devices(kube, node_name)
    for r in await configure_netdevs(dev, metadata, jumbo_mtu, netns):
        log.info("netdev %s: %s", r.ifname, r.action)
    return dev


class _Latest:
    """The newest ERdmaDevice seen, and a flag that it changed: the reconciler needs only the
    newest state, so a burst of watch events collapses into one re-computation."""

    def __init__(self) -> None:
        self.value: crd.ERdmaDevice | None = None
        self.changed = asyncio.Event()

    def put(self, value: crd.ERdmaDevice | None) -> None:
        self.value = value
        self.changed.set()

    async def wait(
        self, timeout: float | None, also: asyncio.Event | None = None
    ) -> crd.ERdmaDevice | None:
        """The newest value once it changes or ``also`` is set, or after ``timeout`` seconds
        (a retry) anyway."""
        waits = [asyncio.ensure_future(e.wait()) for e in (self.changed, also) if e is not None]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        self.changed.clear()
        if also is not None:
            also.clear()
        return self.value


async def _watch_into(kube: KubeApi, node_name: str, latest: _Latest, backoff: Backoff) -> None:
    """Feed every state of ERdmaDevice ``node_name`` into ``latest``, re-watching forever."""
    last = failure = ""
    log.info("watching ERdmaDevice %s; its Ready devices are exposed", node_name)
    while True:
        try:
            async for kind, obj in kube.watch_device(node_name):
                backoff.reset()
                failure = ""
                if kind == "DELETED":
                    log.info("ERdmaDevice %s was deleted; nothing is exposed", node_name)
                    last = ""
                    latest.put(None)
                    continue
                try:
                    dev = crd.parse(obj)
                except crd.CrdError as exc:
                    log.error("ignoring malformed ERdmaDevice: %s", exc)
                    continue
                progress = describe_progress(dev)
                if progress != last:
                    log.info("ERdmaDevice %s: %s", node_name, progress)
                    last = progress
                latest.put(dev)
        except (ApiError, httpx.HTTPError, OSError) as exc:
            failure = _watch_failed(node_name, exc, failure)
        await asyncio.sleep(backoff.next_delay())


async def follow_devices(
    kube: KubeApi,
    node_name: str,
    bring_up: BringUp,
    expose: Expose,
    jumbo_mtu: int = DEFAULT_JUMBO_MTU,
    retry: Backoff | None = None,
    devices_appeared: asyncio.Event | None = None,
) -> None:
    """Keep the exposure equal to the Ready devices of ERdmaDevice ``node_name``; never returns.

    The watch runs beside the reconciler, so a slow netdev bring-up never stalls the watch; a
    failed bring-up is retried at a `Backoff` pace (1 s up to 30 s) even with no new event, and
    at once when ``devices_appeared`` is set: ECS may call an ERI in use before the node's
    kernel shows it, and the rescan that finds it should not then wait for the next retry.
    """
    latest = _Latest()
    exposure = RegularExposure(bring_up, expose, jumbo_mtu)
    retry = retry or Backoff(initial=1.0, maximum=30.0)
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(_watch_into(kube, node_name, latest, Backoff(initial=0.25, maximum=5.0)))
        pending = False
        while True:
            dev = await latest.wait(
                retry.next_delay() if pending else None, devices_appeared if pending else None
            )
            pending = not await exposure.apply(dev)
            if not pending:
                retry.reset()
