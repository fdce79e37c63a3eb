"""Local mode: bring the selected ERIs' netdevs up from instance metadata, then expose them.

Local mode has no controller and no ERdmaDevice object. As the reference does, the agent builds
one in memory from the devices `exposedLocalERIs` selects, every device counting as Ready, and
hands it to the Regular mode reconciler (`RegularExposure`), so both modes follow the same
rules: the ERI whose MAC is the instance's primary (metadata ``mac``) is left to the OS; each
other ERI that is down or has no address gets the address, prefix, gateway and routes metadata
reports for its MAC; one already up with an address is not touched; a device is exposed once
its netdev is up; a failure keeps that device hidden, is logged once per error and retried at a
`Backoff` pace.

Where the reference says nothing, or differs:

- MTU: whether the instance has jumbo frames comes from the cloud API, which Local mode never
  calls, so the netdev's MTU is kept (the reference never sets an MTU in Local mode either).
- A selected device whose netdev is not in the agent's network namespace (moved into a pod, or
  an agent run without hostNetwork) is exposed and left alone: there is nothing here to set up.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from erdma.agent.eri_netdevs import DEFAULT_JUMBO_MTU, RegularExposure, metadata_bring_up
from erdma.agent.exposure import Exposure
from erdma.aio import Backoff
from erdma.host.metadata import MetadataClient, MetadataError
from erdma.host.model import DeviceSnapshot, RdmaDevice
from erdma.host.netdev import present_macs
from erdma.kube import crd

log = logging.getLogger(__name__)


def in_memory_device(devices: Iterable[RdmaDevice], primary_mac: str) -> crd.ERdmaDevice:
    """The ERdmaDevice Local mode stands in for: ``devices``, all Ready, no jumbo frames."""
    infos = tuple(
        crd.DeviceInfo(d.name, d.mac.lower(), "", -1, d.mac.lower() == primary_mac)
        for d in devices
        if d.mac
    )
    ready = tuple(crd.DeviceStatus(i.id, crd.READY) for i in infos)
    return crd.ERdmaDevice("local", "", infos, jumbo_frame=False, statuses=ready)


class LocalBringUp:
    """One Local mode round: which of the selected devices to expose, their netdevs set up."""

    def __init__(self, metadata: MetadataClient, netns: str | None = None) -> None:
        self.metadata = metadata
        self.netns = netns
        # `apply` exposes the union with the devices in other namespaces, so this callback
        # has nothing to do; `RegularExposure.exposed` is read instead
        self.regular = RegularExposure(
            metadata_bring_up(metadata, netns), lambda _macs: None, DEFAULT_JUMBO_MTU
        )
        self._primary = ""  # the primary ENI's MAC once metadata told it; it never changes
        self._logged: dict[str, str] = {}  # what was last logged, by topic

    def _once(self, topic: str, message: str, level: int, *args: object) -> None:
        """Log ``message`` unless it is what ``topic`` last logged (a retry logs nothing)."""
        text = message % args
        if self._logged.get(topic) != text:
            log.log(level, "%s", text)
        self._logged[topic] = text

    async def _primary_mac(self) -> str | None:
        """The primary ENI's MAC, or None (logged once per error) while metadata fails."""
        if not self._primary:
            try:
                self._primary = await self.metadata.primary_mac()
            except MetadataError as exc:
                self._once(
                    "primary",
                    "cannot tell the primary ENI from metadata (%s); the ERIs "
                    "here are not configured or exposed yet, retrying",
                    logging.WARNING,
                    exc,
                )
                return None
            self._logged.pop("primary", None)
        return self._primary

    def _without_mac(self, selected: Sequence[RdmaDevice]) -> None:
        """Say once per device why one whose MAC cannot be read is left out: its netdev, and
        so whether it is up, cannot be found."""
        for device in selected:
            topic = f"no mac {device.name}"
            if device.mac:
                self._logged.pop(topic, None)
            elif topic not in self._logged:
                self._logged[topic] = device.name
                reason = "its MAC address cannot be read from sysfs, so its netdev cannot be found"
                log.warning("device not exposed", extra={"device": device.name, "reason": reason})

    async def apply(self, selected: Sequence[RdmaDevice]) -> tuple[frozenset[str], bool]:
        """The MACs of ``selected`` to expose, and False when a bring-up has to be retried."""
        self._without_mac(selected)
        macs = {d.mac.lower() for d in selected if d.mac}
        here = await asyncio.to_thread(present_macs, macs, self.netns)
        elsewhere = frozenset(macs - here)
        if elsewhere:
            self._once(
                "elsewhere",
                "netdev of %s not in the agent's network namespace: exposed without configuring it",
                logging.INFO,
                ", ".join(sorted(elsewhere)),
            )
        else:
            self._logged.pop("elsewhere", None)
        primary = await self._primary_mac() if here else ""
        if primary is None:
            return elsewhere, False
        mine = [d for d in selected if d.mac and d.mac.lower() in here]
        complete = await self.regular.apply(in_memory_device(mine, primary))
        return elsewhere | (self.regular.exposed or frozenset()), complete


async def follow_local(
    current: Callable[[], tuple[Exposure, DeviceSnapshot]],
    expose: Callable[[Exposure], None],
    metadata: MetadataClient,
    interval: float,
    *,
    netns: str | None = None,
    retry: Backoff | None = None,
) -> None:
    """Keep the exposure equal to the selected devices whose netdev is up; never returns.

    ``current`` (the `exposedLocalERIs` rule and the latest rescan) is read every ``interval``
    seconds and handled again when its selection changes; a round that left a device down is
    repeated at a `Backoff` pace (1 s up to 30 s) meanwhile. ``expose`` gets the rule narrowed
    to the MACs chosen, on change only; the agent's DRA slice follows at once.
    """
    rounds = LocalBringUp(metadata, netns)
    retry = retry or Backoff(initial=1.0, maximum=30.0)
    shown: Exposure | None = None
    handled: tuple[tuple[str, str | None], ...] | None = None
    due = math.inf  # when an incomplete round is repeated (time.monotonic)
    while True:
        rule, snapshot = current()
        selected = rule.select(snapshot.erdma_devices)
        key = tuple((d.name, d.mac) for d in selected)
        if key != handled or time.monotonic() >= due:
            chosen, complete = await rounds.apply(selected)
            handled = key
            if complete:
                retry.reset()
            due = math.inf if complete else time.monotonic() + retry.next_delay()
            if (exposure := replace(rule, macs=chosen)) != shown:
                shown = exposure
                expose(exposure)
                log.info(
                    "Local mode: exposing the selected ERIs whose netdev is up",
                    extra={"macs": sorted(chosen)},
                )
        await asyncio.sleep(interval)
