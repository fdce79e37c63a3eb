"""Agent side of Regular mode: wait for this Node's ERIs, then configure their netdevs.

The controller creates and attaches the ERIs asynchronously; the agent must not look for the
devices before ECS has attached them. The reference agent read the ERdmaDevice once a minute,
ignored its status and crashed until the attach landed. Here the agent watches the object (one
long-lived request, no polling), logs progress ("1/2 Ready, eni-x Pending: attaching"), and
returns only when every device is Ready. Then each secondary ERI's netdev is brought up with
the address the VPC assigned (from instance metadata); the primary ENI belongs to the OS.
"""

from __future__ import annotations

import asyncio
import logging

import httpx2 as httpx
from lightkube.core.exceptions import ApiError

from erdma.aio import Backoff
from erdma.host.metadata import MetadataClient
from erdma.host.netdev import NetdevResult, configure_eri_netdev
from erdma.kube import crd
from erdma.kube.client import KubeApi

log = logging.getLogger(__name__)

DEFAULT_JUMBO_MTU = 8500


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


async def wait_for_devices(
    kube: KubeApi, node_name: str, backoff: Backoff | None = None
) -> crd.ERdmaDevice:
    """Watch ERdmaDevice ``node_name`` until all its devices are Ready, and return it.

    API errors and dropped watches are logged and the watch is re-established, quickly at
    first (an API server answers 429 while its watch cache for a new CRD warms up), then at a
    `Backoff` pace up to 5 s; the function returns only with a Ready object (cancel to give up).
    """
    last = ""
    backoff = backoff or Backoff(initial=0.25, maximum=5.0)
    log.info("waiting for ERdmaDevice %s to be created and Ready", node_name)
    while True:
        try:
            async for kind, obj in kube.watch_device(node_name):
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
            log.warning("watching ERdmaDevice %s failed (%s); retrying", node_name, exc)
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
