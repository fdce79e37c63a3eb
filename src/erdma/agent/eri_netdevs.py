"""Exposing ERIs whose netdevs are up: one ERdmaDevice state in, the MACs to expose out.

Both modes use it: Regular mode with the controller's ERdmaDevice, Local mode with one built in
memory from the devices `exposedLocalERIs` selects. It needs no Kubernetes client, so a Local
mode agent does not load one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from erdma.host.metadata import MetadataClient, MetadataError
from erdma.host.netdev import NetdevError, NetdevResult, configure_eri_netdev
from erdma.kube import crd

log = logging.getLogger(__name__)

DEFAULT_JUMBO_MTU = 8500

Expose = Callable[[frozenset[str]], None]
"""Called with the (lower-case) MACs to expose whenever that set changes."""
BringUp = Callable[[crd.DeviceInfo, int | None], Awaitable[NetdevResult]]
"""Bring up one secondary ERI's netdev (with this MTU, or the current one for None)."""


def ready_devices(dev: crd.ERdmaDevice | None) -> list[crd.DeviceInfo]:
    """The spec devices whose status is Ready (none for a deleted object)."""
    if dev is None:
        return []
    return [d for d in dev.devices if (st := dev.status_of(d.id)) and st.status == crd.READY]


class RegularExposure:
    """Re-computes the exposure from one ERdmaDevice state: its Ready devices, each secondary
    ERI's netdev brought up first (once per MAC and MTU while it stays Ready). An ERI whose
    netdev cannot be brought up yet (metadata or the link lagging the attach) stays hidden and
    `apply` reports it, so the caller retries."""

    def __init__(self, bring_up: BringUp, expose: Expose, jumbo_mtu: int) -> None:
        self.bring_up = bring_up
        self.expose = expose
        self.jumbo_mtu = jumbo_mtu
        self.exposed: frozenset[str] | None = None
        self._up: set[tuple[str, int | None]] = set()
        self._failing: dict[str, str] = {}  # MAC -> the bring-up error last logged for it

    async def apply(self, dev: crd.ERdmaDevice | None) -> bool:
        """Expose ``dev``'s Ready devices; False when one of them has to be tried again."""
        ready = ready_devices(dev)
        mtu = self.jumbo_mtu if dev is not None and dev.jumbo_frame else None
        macs: set[str] = set()
        complete = True
        for d in ready:
            key = (d.mac.lower(), mtu)
            if not d.is_primary_eni and key not in self._up:
                try:
                    result = await self.bring_up(d, mtu)
                except (MetadataError, NetdevError, OSError) as exc:
                    if self._failing.get(key[0]) != str(exc):  # once per error, not per retry
                        log.warning(
                            "%s (%s) is Ready but its netdev is not up yet (%s); "
                            "not exposed, retrying",
                            d.id,
                            d.mac,
                            exc,
                        )
                    self._failing[key[0]] = str(exc)
                    complete = False
                    continue
                log.info("netdev %s: %s", result.ifname, result.action)
                self._up.add(key)
                self._failing.pop(key[0], None)
            macs.add(d.mac.lower())
        # a device that leaves Ready gets its netdev checked (and a failure logged) again
        ready_macs = {d.mac.lower() for d in ready}
        self._up = {(mac, m) for mac, m in self._up if mac in ready_macs and m == mtu}
        self._failing = {m: e for m, e in self._failing.items() if m in ready_macs}
        chosen = frozenset(macs)
        if chosen != self.exposed:
            self.exposed = chosen
            self.expose(chosen)
        return complete


def metadata_bring_up(metadata: MetadataClient, netns: str | None = None) -> BringUp:
    """The real `BringUp`: the VPC address from instance metadata, then netlink."""

    async def bring_up(d: crd.DeviceInfo, mtu: int | None) -> NetdevResult:
        net = await metadata.eni_network(d.mac)
        return await asyncio.to_thread(configure_eri_netdev, d.mac, net, mtu, netns)

    return bring_up
