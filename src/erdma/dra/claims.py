"""Reading a ResourceClaim's allocation: which of this node's devices kubelet must prepare.

The scheduler writes `status.allocation.devices.results` (one entry per allocated device, with
request, driver, pool, device and, for consumable capacity, shareID and consumedCapacity).
Kubelet only names the claim; the driver reads the allocation from the API server, keeps the
results of its own driver and refuses anything it cannot honour with an error that says which
field holds what and what would be accepted. Pure: the caller fetches the object.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

RESULTS = "status.allocation.devices.results"


class ClaimError(ValueError):
    """The claim cannot be prepared on this node; the message names the field and the value."""


@dataclass(frozen=True)
class ClaimRef:
    """What kubelet sends for one claim: namespace, UID and name, all required."""

    namespace: str
    uid: str
    name: str

    def check(self) -> None:
        missing = [k for k in ("namespace", "uid", "name") if not getattr(self, k)]
        if missing:
            raise ClaimError(
                f"claim {self.namespace}/{self.name} (uid {self.uid!r}): "
                f"{', '.join(missing)} empty; kubelet must send namespace, uid and name"
            )

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} (uid {self.uid})"


@dataclass(frozen=True)
class Allocated:
    """One device of this driver in the claim's allocation."""

    request: str
    pool: str
    device: str
    share_id: str | None = None


def _field(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value:
        raise ClaimError(f"{where}.{key}={value!r}: must be a non-empty string")
    return value


def allocated_devices(
    claim: Mapping[str, Any],
    ref: ClaimRef,
    *,
    driver: str,
    pool: str,
    known: Collection[str],
) -> list[Allocated]:
    """This driver's devices in `claim`'s allocation, checked against this node's devices."""
    meta = claim.get("metadata") or {}
    if meta.get("uid") != ref.uid:
        raise ClaimError(
            f"claim {ref}: the API server has uid {meta.get('uid')!r} for "
            f"{ref.namespace}/{ref.name}; the claim was deleted and recreated, kubelet will retry"
        )
    allocation = (claim.get("status") or {}).get("allocation")
    if not isinstance(allocation, Mapping):
        raise ClaimError(
            f"claim {ref}: status.allocation={allocation!r}: the claim is not allocated"
        )
    devices = allocation.get("devices") or {}
    results = devices.get("results") if isinstance(devices, Mapping) else None
    if not isinstance(results, list):
        raise ClaimError(f"claim {ref}: {RESULTS}={results!r}: must be a list of results")
    _check_config(devices.get("config"), ref, driver)
    found: list[Allocated] = []
    for index, entry in enumerate(results):
        where = f"{RESULTS}[{index}]"
        if not isinstance(entry, Mapping):
            raise ClaimError(f"claim {ref}: {where}={entry!r}: must be a mapping")
        if entry.get("driver") != driver:
            continue  # another driver's device in the same claim: not ours to prepare
        got_pool = _field(entry, "pool", where)
        device = _field(entry, "device", where)
        if got_pool != pool:
            raise ClaimError(
                f"claim {ref}: {where}.pool={got_pool!r}: this node's pool is {pool!r}; "
                "the claim was allocated for another node"
            )
        if device not in known:
            raise ClaimError(
                f"claim {ref}: {where}.device={device!r} is not a device of pool {pool!r}; "
                f"this node publishes {sorted(known) or 'no devices'}"
            )
        share = entry.get("shareID")
        found.append(Allocated(_field(entry, "request", where), got_pool, device, share or None))
    return found


def _check_config(config: object, ref: ClaimRef, driver: str) -> None:
    """The driver takes no opaque parameters: refuse them rather than silently ignore them."""
    if config is None:
        return
    if not isinstance(config, list):
        raise ClaimError(
            f"claim {ref}: status.allocation.devices.config={config!r}: must be a list"
        )
    for index, entry in enumerate(config):
        opaque = entry.get("opaque") if isinstance(entry, Mapping) else None
        if not isinstance(opaque, Mapping) or opaque.get("driver") != driver:
            continue
        if opaque.get("parameters"):
            raise ClaimError(
                f"claim {ref}: status.allocation.devices.config[{index}].opaque.parameters="
                f"{opaque.get('parameters')!r}: driver {driver} takes no opaque parameters; "
                "remove them from the claim or its DeviceClass"
            )
