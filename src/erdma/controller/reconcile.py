"""One reconcile of one Node: find its instance, ensure its ERIs, write its ERdmaDevice.

Unlike the reference, every pass re-plans from ECS (``erdma.controller.eri.ensure_eris``), so
instance-type changes are followed and a Ready ERI that was detached out of band is attached
again; the spec and status are rewritten only when they change. Node deletion (or garbage
collection of the object) runs ``cleanup_eris``, which only touches ENIs this controller
created, before the object's finalizer is dropped. Each cloud action and failure becomes an
Event on the Node. ``reconcile`` returns the delay after which the Node should be looked at
again, or None when only a watch event should wake it.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from erdma.controller.cloud import CloudApi, CloudError, Instance
from erdma.controller.config import ControllerConfig
from erdma.controller.eri import EnsureResult, EriStatus, cleanup_eris, ensure_eris
from erdma.kube import crd
from erdma.kube.client import KubeApi
from erdma.kube.events import EventRecorder

log = logging.getLogger(__name__)

REASON_NOT_SUPPORTED = "ERdmaNotSupported"
REASON_LOOKUP_FAILED = "InstanceLookupFailed"
REASON_CLOUD_FAILED = "ERIReconcileFailed"
DETACHED_NOTE = "was detached outside the controller; attaching it again"


class Skip(Exception):
    """Stop this pass; the Event has been recorded and the Node is looked at again later."""


def _parse_time(value: str) -> float:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def node_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def instance_id_from_provider(provider_id: str) -> str | None:
    """``<region>.<i-...>`` (the ACK form) gives the instance id; anything else gives None."""
    parts = provider_id.split(".")
    if len(parts) == 2 and crd.INSTANCE_ID_RE.match(parts[1]):
        return parts[1]
    return None


def internal_ip(node: Mapping[str, Any]) -> str | None:
    for addr in (node.get("status") or {}).get("addresses") or []:
        if addr.get("type") == "InternalIP" and addr.get("address"):
            return str(addr["address"])
    return None


class NodeReconciler:
    """Reconciles Nodes against ECS and ERdmaDevice objects."""

    def __init__(
        self,
        kube: KubeApi,
        cloud: CloudApi,
        config: ControllerConfig,
        events: EventRecorder,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.cloud = cloud
        self.config = config
        self.events = events
        self.clock = clock

    async def reconcile(self, name: str) -> float | None:
        """Bring Node ``name`` and its ERdmaDevice in line; returns the requeue delay."""
        node = await self.kube.get_node(name)
        if node is None or node["metadata"].get("deletionTimestamp"):
            return await self.node_gone(name)
        if not self.config.owns(node["metadata"].get("labels")):
            log.debug("node %s does not match nodeSelector; not managed", name)
            return None
        wait = self._ready_gate(node)
        if wait is not None:
            return wait
        try:
            instance = await self._instance(node)
            caps = await self.cloud.instance_type_caps(instance.instance_type)
            result = await ensure_eris(
                self.cloud,
                instance,
                caps,
                manage_non_owned=self.config.manage_non_owned_enis,
                token_salt=str(node["metadata"].get("uid", "")),
            )
        except Skip:
            return self.config.error_requeue_seconds
        except CloudError as exc:
            await self.events.record(node, "Warning", REASON_CLOUD_FAILED, str(exc))
            return self.config.error_requeue_seconds
        if not result.supported:
            return await self._not_supported(node, instance, result)
        return await self._write(node, instance, result)

    def _ready_gate(self, node: Mapping[str, Any]) -> float | None:
        """Seconds to wait before touching a NotReady Node, or None to go ahead.

        Attaching ERIs before the Node is Ready caused kernel memory problems, so wait up to
        ``waitNodeReadyTimeoutSeconds`` after the Node's creation, then proceed anyway.
        """
        if node_ready(node):
            return None
        created = node["metadata"].get("creationTimestamp")
        age = self.clock() - _parse_time(created) if created else 0.0
        left = self.config.wait_node_ready_timeout_seconds - age
        if left <= 0:
            log.info(
                "node %s still not Ready after %.0fs; proceeding", node["metadata"]["name"], age
            )
            return None
        return min(left, self.config.node_not_ready_requeue_seconds)

    async def _instance(self, node: Mapping[str, Any]) -> Instance:
        provider = str((node.get("spec") or {}).get("providerID") or "")
        instance_id = instance_id_from_provider(provider)
        instance = await self.cloud.find_instance(instance_id=instance_id) if instance_id else None
        if instance is not None:
            return instance
        ip = internal_ip(node)
        if ip is None:
            why = f"providerID {provider!r} names no instance and the Node has no InternalIP"
            await self.events.record(node, "Warning", REASON_LOOKUP_FAILED, why)
            raise Skip(why)
        instance = await self.cloud.find_instance(private_ip=ip)
        if instance is None:
            why = (
                f"no ECS instance in region {self.cloud.region} has providerID {provider!r} "
                f"or private IP {ip}"
            )
            await self.events.record(node, "Warning", REASON_LOOKUP_FAILED, why)
            raise Skip(why)
        return instance

    async def _not_supported(
        self, node: Mapping[str, Any], instance: Instance, result: EnsureResult
    ) -> float | None:
        name = node["metadata"]["name"]
        message = (
            f"instance {instance.id} ({instance.instance_type}) cannot use eRDMA: "
            f"{result.problem}; no ERdmaDevice is created"
        )
        await self.events.record(node, "Normal", REASON_NOT_SUPPORTED, message)
        current = await self.kube.get_device(name)
        if current is not None:  # the instance type changed to one without eRDMA
            return await self._remove(current, node)
        return None

    async def _write(
        self, node: Mapping[str, Any], instance: Instance, result: EnsureResult
    ) -> float:
        name = node["metadata"]["name"]
        current = await self.kube.get_device(name)
        before = crd.parse(current) if current is not None else None
        if current is not None and before is not None and before.deleting:
            # Deleted by a person while the Node lives: let it go; the next pass recreates it.
            await self.kube.drop_finalizer(current)
            return self.config.pending_requeue_seconds
        jumbo = await self._jumbo(node, instance)
        await self._report(node, result, before)
        devices = [
            crd.DeviceInfo(
                id=d.eni_id,
                mac=d.mac,
                instance_id=instance.id,
                network_card_index=d.card_index,
                is_primary_eni=d.is_primary,
                queue_pair=d.queue_pair_number,
            )
            for d in result.devices
            if d.eni_id
        ]
        statuses = [
            crd.DeviceStatus(d.eni_id, _state(d), self._message(d, before))
            for d in result.devices
            if d.eni_id
        ]
        if current is None:
            obj = crd.build(name, node["metadata"]["uid"], instance.id, devices, jumbo)
            current = await self.kube.create_device(obj)
            log.info("created ERdmaDevice %s with %d devices", name, len(devices))
        else:
            spec = crd.spec_body(devices, jumbo)
            labels = {crd.LABEL_INSTANCE_ID: instance.id, crd.LABEL_NODE_NAME: name}
            meta = current["metadata"]
            if current.get("spec") != spec or any(
                (meta.get("labels") or {}).get(k) != v for k, v in labels.items()
            ):
                await self.kube.patch_device(name, {"metadata": {"labels": labels}, "spec": spec})
        status = crd.status_body(statuses)
        if current.get("status") != status:
            await self.kube.patch_device_status(name, status)
        if result.ready:
            return self.config.reverify_interval_seconds
        if result.problem or any(d.status == crd.FAILED for d in result.devices):
            return self.config.error_requeue_seconds
        return self.config.pending_requeue_seconds

    async def _jumbo(self, node: Mapping[str, Any], instance: Instance) -> bool:
        try:
            return await self.cloud.jumbo_frame(instance.id)
        except CloudError as exc:
            message = f"cannot read jumbo-frame setting, assuming off: {exc}"
            await self.events.record(node, "Warning", REASON_CLOUD_FAILED, message)
            return False

    @staticmethod
    def _was_attached(before: crd.ERdmaDevice | None, eni_id: str) -> bool:
        """Whether the previous pass saw this ERI attached (or already noticed it detached)."""
        st = before.status_of(eni_id) if before else None
        if st is None:
            return False
        return st.status == crd.READY or "Detaching" in st.message or st.message == DETACHED_NOTE

    def _message(self, d: EriStatus, before: crd.ERdmaDevice | None) -> str:
        if d.status == crd.PENDING and self._was_attached(before, d.eni_id):
            return DETACHED_NOTE
        return d.message

    async def _report(
        self, node: Mapping[str, Any], result: EnsureResult, before: crd.ERdmaDevice | None
    ) -> None:
        """Events for what this pass did in the cloud and for what went wrong."""
        known = {d.id for d in before.devices} if before else set()
        for d in result.devices:
            where = f"{d.eni_id or 'ERI'} on network card {d.card_index}"
            if d.status == crd.FAILED:
                message = f"{where}: {d.message}"
                await self.events.record(node, "Warning", REASON_CLOUD_FAILED, message)
            elif d.message == "attaching" and self._was_attached(before, d.eni_id):
                message = f"{where} was detached out of band; attaching it again"
                await self.events.record(node, "Warning", "ERIReattaching", message)
            elif d.message == "attaching":
                await self.events.record(node, "Normal", "ERIAttaching", f"attaching {where}")
            elif d.is_primary and d.status == crd.READY and d.eni_id not in known:
                message = (
                    f"primary ENI {d.eni_id} converted to HighPerformance mode with "
                    f"{d.queue_pair_number} queue pairs"
                )
                await self.events.record(node, "Normal", "PrimaryENIConverted", message)
        if result.problem:
            await self.events.record(node, "Warning", REASON_CLOUD_FAILED, result.problem)

    async def node_gone(self, name: str) -> float | None:
        """The Node is deleted: clean up its ERIs (if configured), then remove its object."""
        current = await self.kube.get_device(name)
        if current is None:
            return None
        ref = {"metadata": {"name": name, "uid": _owner_uid(current)}}
        return await self._remove(current, ref)

    async def _remove(self, current: Mapping[str, Any], node: Mapping[str, Any]) -> float | None:
        """Run ``cleanup_eris`` for the object's instance, then drop the finalizer and delete.

        Returns a requeue delay while ENIs are still detaching or a cloud call failed; the
        object (and its finalizer) stays until the cleanup is complete, so nothing leaks when
        the controller restarts half-way.
        """
        name = current["metadata"]["name"]
        instance_id = crd.parse(current).instance_id
        ours = crd.FINALIZER in (current["metadata"].get("finalizers") or [])
        if ours and self.config.cleanup_on_node_delete and instance_id:
            try:
                cleaned = await cleanup_eris(self.cloud, instance_id)
            except CloudError as exc:
                await self.events.record(node, "Warning", "ERICleanupFailed", str(exc))
                return self.config.error_requeue_seconds
            if cleaned.deleted:
                message = f"deleted {', '.join(cleaned.deleted)}"
                await self.events.record(node, "Normal", "ERIDeleted", message)
            if cleaned.errors:
                message = "; ".join(cleaned.errors)
                await self.events.record(node, "Warning", "ERICleanupFailed", message)
            if not cleaned.done:
                return self.config.pending_requeue_seconds
        await self.kube.drop_finalizer(current)
        await self.kube.delete_device(name)
        log.info("removed ERdmaDevice %s", name)
        return None


def _owner_uid(obj: Mapping[str, Any]) -> str:
    refs = obj["metadata"].get("ownerReferences") or []
    return next((str(r.get("uid", "")) for r in refs if r.get("kind") == "Node"), "")


def _state(d: EriStatus) -> crd.DeviceState:
    return {"Ready": crd.READY, "Failed": crd.FAILED}.get(d.status, crd.PENDING)
