"""The ERdmaDevice custom resource as plain Python: build the object, parse it back.

The controller writes one ERdmaDevice per Node (name = Node name) and the agent on that Node
reads it. Both sides go through this module so the wire format (field names compatible with the
reference controller, see deploy/crds/) is defined once, and a malformed object is reported with
the exact field, the value and what is accepted instead of failing somewhere deep in the agent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

GROUP: Final = "network.alibabacloud.com"
VERSION: Final = "v1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "ERdmaDevice"
PLURAL: Final = "erdmadevices"
CRD_NAME: Final = f"{PLURAL}.{GROUP}"

LABEL_INSTANCE_ID: Final = "alibabacloud.com/instance-id"
LABEL_NODE_NAME: Final = "alibabacloud.com/nodename"
# Held by the controller so that an object deleted by garbage collection (Node gone) still
# triggers cloud-side cleanup before it disappears. Same name as the reference's constant.
FINALIZER: Final = "network.alibabacloud.com/erdma-controller"

DeviceState = Literal["Pending", "Ready", "Failed"]
PENDING: Final[DeviceState] = "Pending"
READY: Final[DeviceState] = "Ready"
FAILED: Final[DeviceState] = "Failed"
STATES: Final = (PENDING, READY, FAILED)

INSTANCE_ID_RE: Final = re.compile(r"^i-[0-9a-z]+$")
ENI_ID_RE: Final = re.compile(r"^eni-[0-9a-z]+$")
MAC_RE: Final = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


class CrdError(ValueError):
    """An ERdmaDevice field that does not hold an accepted value."""


@dataclass(frozen=True)
class DeviceInfo:
    """One ERI in ``spec.devices``."""

    id: str
    mac: str
    instance_id: str
    network_card_index: int = 0
    is_primary_eni: bool = False
    queue_pair: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "mac": self.mac,
            "instanceID": self.instance_id,
            "networkCardIndex": self.network_card_index,
            "isPrimaryENI": self.is_primary_eni,
            "queuePair": self.queue_pair,
        }


@dataclass(frozen=True)
class DeviceStatus:
    """One entry of ``status.devices``: what the controller last saw for a spec device."""

    id: str
    status: DeviceState
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "message": self.message}


@dataclass(frozen=True)
class ERdmaDevice:
    """A parsed ERdmaDevice object."""

    name: str
    instance_id: str
    devices: tuple[DeviceInfo, ...]
    jumbo_frame: bool = False
    statuses: tuple[DeviceStatus, ...] = ()
    deleting: bool = False

    def status_of(self, eni_id: str) -> DeviceStatus | None:
        return next((s for s in self.statuses if s.id == eni_id), None)

    @property
    def all_ready(self) -> bool:
        """True when every spec device has a Ready status entry (and there is at least one)."""
        return bool(self.devices) and all(
            (st := self.status_of(d.id)) is not None and st.status == READY for d in self.devices
        )


def build(
    node_name: str,
    node_uid: str,
    instance_id: str,
    devices: Iterable[DeviceInfo],
    jumbo_frame: bool,
) -> dict[str, Any]:
    """The full object for a Node: labels, ownerReference to the Node, finalizer, spec."""
    _check(INSTANCE_ID_RE, instance_id, "metadata.labels[alibabacloud.com/instance-id]", "i-...")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": node_name,
            "labels": {LABEL_INSTANCE_ID: instance_id, LABEL_NODE_NAME: node_name},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}
            ],
            "finalizers": [FINALIZER],
        },
        "spec": spec_body(devices, jumbo_frame),
    }


def spec_body(devices: Iterable[DeviceInfo], jumbo_frame: bool) -> dict[str, Any]:
    """``spec`` for a device list, sorted by card index so the object is stable across runs."""
    ordered = sorted(devices, key=lambda d: (d.network_card_index, d.id))
    return {"devices": [d.to_dict() for d in ordered], "jumboFrame": jumbo_frame}


def status_body(statuses: Iterable[DeviceStatus]) -> dict[str, Any]:
    """``status`` for the given entries, with the summaries shown by ``kubectl get``.

    ``deviceIDs`` repeats the ids as one string because a printer column shows only the first
    value of an array: ``.spec.devices[*].id`` would show one ERI of a two-card node.
    """
    entries = sorted(statuses, key=lambda s: s.id)
    ready = sum(1 for s in entries if s.status == READY)
    return {
        "devices": [s.to_dict() for s in entries],
        "deviceIDs": ",".join(s.id for s in entries),
        "ready": f"{ready}/{len(entries)}",
    }


def parse(obj: Mapping[str, Any]) -> ERdmaDevice:
    """Read an object from the API server; raises ``CrdError`` naming the bad field."""
    meta = _mapping(obj.get("metadata"), "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise CrdError(f"ERdmaDevice metadata.name: {name!r} is not a Node name")
    where = f"ERdmaDevice {name}"
    labels = _mapping(meta.get("labels") or {}, f"{where} metadata.labels")
    spec = _mapping(obj.get("spec"), f"{where} spec")
    raw_devices = spec.get("devices")
    if not isinstance(raw_devices, list):
        raise CrdError(f"{where} spec.devices: {raw_devices!r} is not a list of devices")
    devices = tuple(_device(d, f"{where} spec.devices[{i}]") for i, d in enumerate(raw_devices))
    status = _mapping(obj.get("status") or {}, f"{where} status")
    raw_statuses = status.get("devices") or []
    if not isinstance(raw_statuses, list):
        raise CrdError(f"{where} status.devices: {raw_statuses!r} is not a list")
    statuses = tuple(_status(s, f"{where} status.devices[{i}]") for i, s in enumerate(raw_statuses))
    instance_id = labels.get(LABEL_INSTANCE_ID) or next(
        (d.instance_id for d in devices if d.instance_id), ""
    )
    return ERdmaDevice(
        name=name,
        instance_id=str(instance_id),
        devices=devices,
        jumbo_frame=_bool(spec.get("jumboFrame", False), f"{where} spec.jumboFrame"),
        statuses=statuses,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def _device(raw: Any, where: str) -> DeviceInfo:
    d = _mapping(raw, where)
    eni_id = _str(d.get("id", ""), f"{where}.id")
    _check(ENI_ID_RE, eni_id, f"{where}.id", "an ENI id like eni-2ze0123456789abcdef")
    mac = _str(d.get("mac", ""), f"{where}.mac")
    _check(MAC_RE, mac, f"{where}.mac", "a lower-case colon MAC like 00:16:3e:2f:37:75")
    instance_id = _str(d.get("instanceID", ""), f"{where}.instanceID")
    if instance_id:
        _check(INSTANCE_ID_RE, instance_id, f"{where}.instanceID", "an instance id like i-abc")
    return DeviceInfo(
        id=eni_id,
        mac=mac,
        instance_id=instance_id,
        network_card_index=_int(d.get("networkCardIndex", 0), f"{where}.networkCardIndex"),
        is_primary_eni=_bool(d.get("isPrimaryENI", False), f"{where}.isPrimaryENI"),
        queue_pair=_int(d.get("queuePair", 0), f"{where}.queuePair"),
    )


def _status(raw: Any, where: str) -> DeviceStatus:
    s = _mapping(raw, where)
    state = s.get("status")
    if state not in STATES:
        raise CrdError(f"{where}.status: {state!r} is not one of {', '.join(STATES)}")
    return DeviceStatus(
        id=_str(s.get("id", ""), f"{where}.id"),
        status=cast(DeviceState, state),
        message=_str(s.get("message", ""), f"{where}.message"),
    )


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise CrdError(f"{where}: {value!r} is not an object")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise CrdError(f"{where}: {value!r} is not a string")
    return value


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CrdError(f"{where}: {value!r} is not a non-negative integer")
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise CrdError(f"{where}: {value!r} is not true or false")
    return value


def _check(pattern: re.Pattern[str], value: str, where: str, accepted: str) -> None:
    if not pattern.match(value):
        raise CrdError(f"{where}: {value!r} is not valid; expected {accepted}")
