"""`status.devices` of a prepared claim: which device a pod got, its interface and addresses.

As dranet does for the NICs it hands out (KEP-4817), the driver writes one entry per device it
prepared: driver, pool, device (and shareID), a `Ready` condition, and `networkData` with the
device's network interface, its MAC and the global addresses on it, so `kubectl get
resourceclaim -o yaml` shows which ERI the pod got. The write is a server-side apply of those
entries alone with the driver's name as field manager: each driver owns its entries of the
list (keyed by driver, pool, device and shareID), the scheduler's allocation is untouched, and
the API server drops the entries itself when the claim is deallocated. `metadata.uid` in the
applied object makes the API server refuse a claim that was deleted and recreated meanwhile.

A write never fails a Prepare: kubelet needs the CDI devices, not the status, so a refused or
failed write is logged with the claim and the reason. The agent reads the addresses in its own
network namespace, by MAC; outside the host's (no hostNetwork) it finds none and leaves `ips`
out. RBAC: `patch` on `resourceclaims/status`, and from Kubernetes 1.36 `associated-node:patch`
on the synthetic `resourceclaims/driver` for the driver's name (the DRA hardening guide's rule
for node-local drivers).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from erdma.dra.checkpoint import PreparedDevice
from erdma.dra.claims import ClaimRef
from erdma.dra.devices import DraDevice
from erdma.dra.slices import API_VERSION, describe_error
from erdma.host.model import RdmaDevice

log = logging.getLogger(__name__)

#: MAC -> the global addresses (CIDR) of the network device with that MAC; none without one
AddressesOf = Callable[[str], Sequence[str]]
READY_REASON = "Prepared"
#: resource.k8s.io/v1 refuses a status with more (NetworkDeviceDataMaxIPs)
MAX_IPS = 16


def now() -> str:
    """An RFC 3339 time as Kubernetes conditions carry it (whole seconds, UTC)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def network_data(device: RdmaDevice, ips: Sequence[str]) -> dict[str, Any]:
    """`networkData`: the interface, its MAC and (the first `MAX_IPS` of) its addresses,
    each left out when unknown."""
    data: dict[str, Any] = {}
    if device.netdev:
        data["interfaceName"] = device.netdev
    if device.mac:
        data["hardwareAddress"] = device.mac
    if ips:
        data["ips"] = list(dict.fromkeys(ips))[:MAX_IPS]  # the API refuses a repeated one
    return data


def device_status(
    driver: str,
    prepared: PreparedDevice,
    device: RdmaDevice | None,
    ips: Sequence[str],
    at: str,
) -> dict[str, Any]:
    """One `status.devices` entry for a prepared device (`device` None: no longer on the
    node, so no network data)."""
    entry: dict[str, Any] = {
        "driver": driver,
        "pool": prepared.pool_name,
        "device": prepared.device_name,
    }
    if prepared.share_id:
        entry["shareID"] = prepared.share_id
    what = f"{device.name} ({device.uverbs.path})" if device else prepared.device_name
    entry["conditions"] = [
        {
            "type": "Ready",
            "status": "True",
            "reason": READY_REASON,
            "message": f"{what} is in the claim's CDI spec",
            "lastTransitionTime": at,
        }
    ]
    data = network_data(device, ips) if device else {}
    if data:
        entry["networkData"] = data
    return entry


def status_patch(ref: ClaimRef, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The applied configuration: these entries of `status.devices`, for this claim only."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid},
        "status": {"devices": [dict(e) for e in entries]},
    }


class ClaimStatusWriter:
    """Writes the `status.devices` entries of a claim once it is prepared."""

    def __init__(
        self,
        client: AsyncClient,
        driver: str,
        devices: Callable[[], Mapping[str, DraDevice]],
        addresses: AddressesOf,
    ) -> None:
        """`devices`: the driver's published devices now, by slice device name."""
        self.client = client
        self.driver = driver
        self._devices = devices
        self._addresses = addresses

    async def write(self, ref: ClaimRef, prepared: Sequence[PreparedDevice]) -> None:
        """Apply the entries of `prepared`; a failure is logged, never raised."""
        if not prepared:
            return
        published = self._devices()
        at = now()
        entries = []
        for item in prepared:
            found = published.get(item.device_name)
            device = found.device if found else None
            ips = await self._ips(device) if device else ()
            entries.append(device_status(self.driver, item, device, ips, at))
        try:
            await self.client.patch(
                ResourceClaim.Status,
                ref.name,
                status_patch(ref, entries),
                namespace=ref.namespace,
                patch_type=PatchType.APPLY,
                field_manager=self.driver,
                force=True,
            )
        except (httpx.HTTPError, OSError) as exc:  # ApiError is an HTTPError
            log.warning(
                "claim prepared, but its status.devices not written",
                extra={"claim": str(ref), "error": describe_error(exc)},
            )
            return
        log.info(
            "claim status written",
            extra={"claim": str(ref), "devices": [e["device"] for e in entries]},
        )

    async def _ips(self, device: RdmaDevice) -> Sequence[str]:
        if not device.mac:
            return ()
        try:
            return await asyncio.to_thread(self._addresses, device.mac)
        except OSError as exc:  # netlink refused: the status still names the interface
            log.warning(
                "addresses of a DRA device not readable",
                extra={"device": device.name, "mac": device.mac, "error": str(exc)},
            )
            return ()
