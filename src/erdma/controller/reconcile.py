"""One reconcile of one Node: find its instance, ensure its ERIs, write its ERdmaDevice.

Unlike the reference, every pass re-plans from ECS (``erdma.controller.eri.ensure_eris``), so
instance-type changes are followed and a Ready ERI that was detached out of band is attached
again; the spec and status are rewritten only when they change (``device_report`` shapes
them). When the Node is deleted, the object's finalizer is dropped only after
``orphans.cleanup_for_gone_node`` ran: it deletes the ERIs this controller created only once
their instance is gone, and never touches others. Each cloud action and failure becomes an
Event on the Node. ``reconcile`` returns the delay after which the Node should be looked at
again, or None when only a watch event should wake it, and counts the pass by result in the
controller's metrics.
"""

from __future__ import annotations

import datetime
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from erdma.aio import both
from erdma.controller import api_errors, device_report, metrics
from erdma.controller.cloud import CloudApi, CloudError, Instance
from erdma.controller.config import ControllerConfig
from erdma.controller.device_report import REASON_CLOUD_FAILED
from erdma.controller.eri import CleanupResult, EnsureResult, cleanup_eris, ensure_eris
from erdma.controller.metrics import ControllerMetrics
from erdma.controller.nodes import instance_id_from_provider, internal_ip, node_ready
from erdma.controller.orphans import cleanup_for_gone_node
from erdma.controller.streaks import Streaks
from erdma.kube import crd
from erdma.kube.client import KubeApi
from erdma.kube.events import EventRecorder

log = logging.getLogger(__name__)

REASON_NOT_SUPPORTED = "ERdmaNotSupported"
REASON_LOOKUP_FAILED = "InstanceLookupFailed"
#: seconds to the first retry (jittered down to half) of a pass the API server's absence cut
#: short; each further one twice as late, up to ``errorRequeueSeconds``
FIRST_RETRY = 1.0
#: seconds to the first recheck (jittered down to half) of a Node whose ERIs are attaching; each
#: further one 1.5 times as late, up to ``pendingRequeueSeconds``. An attach that has finished
#: waits for the next recheck about half the time it has taken so far (a factor of 2: as long
#: again), for about one more recheck per attach, each a share of a batched look-up.
ATTACH_RECHECK = 0.5
ATTACH_RECHECK_FACTOR = 1.5


class Skip(Exception):
    """Stop this pass; the Event has been recorded and the Node is looked at again later."""


def _parse_time(value: str) -> float:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class NodeReconciler:
    """Reconciles Nodes against ECS and ERdmaDevice objects."""

    def __init__(
        self,
        kube: KubeApi,
        cloud: CloudApi,
        config: ControllerConfig,
        events: EventRecorder,
        clock: Callable[[], float] = time.time,
        controller_metrics: ControllerMetrics | None = None,
    ) -> None:
        self.metrics = controller_metrics or ControllerMetrics()
        self.kube = kube
        self.cloud = cloud
        self.config = config
        self.events = events
        self.clock = clock
        # node name -> the last jumbo-frame read: (instance id, value, time.monotonic())
        self._jumbo_read: dict[str, tuple[str, bool, float]] = {}
        # passes in a row that left a Node's devices attaching, or found the API server away
        self._pending = Streaks(
            ATTACH_RECHECK, config.pending_requeue_seconds, factor=ATTACH_RECHECK_FACTOR
        )
        self._api_away = Streaks(FIRST_RETRY, config.error_requeue_seconds)
        self._api_warned = False

    def bringing_up(self, name: str) -> bool:
        """Whether the Node's last pass left ERIs attaching: its recheck is a follow-up."""
        return name in self._pending

    def _forget(self, name: str) -> None:
        """Drop what is kept about a Node that is gone or no longer has an object."""
        self.metrics.forget_node(name)
        self._jumbo_read.pop(name, None)
        self._pending.end(name)
        self._api_away.end(name)

    async def reconcile(self, name: str) -> float | None:
        """Bring Node ``name`` and its ERdmaDevice in line; returns the requeue delay."""
        started = time.monotonic()
        try:
            result, delay = await self._pass(name)
        except Exception as exc:
            trouble = api_errors.classify(exc)
            if trouble is None:
                self._pending.end(name)
                self.metrics.reconciles.labels(metrics.RESULT_CRASHED).inc()
                raise
            result, delay = trouble.result, self._api_retry(name, exc, trouble)
        else:
            self._api_away.end(name)
            if result != metrics.RESULT_PENDING:  # the bring-up is over, or stopped
                self._pending.end(name)
            if self._api_warned:
                log.info("Kubernetes API server answers again; Nodes are reconciled as usual")
                self._api_warned = False
        finally:
            self.metrics.reconcile_seconds.observe(time.monotonic() - started)
        self.metrics.reconciles.labels(result).inc()
        return delay

    def _api_retry(self, name: str, exc: Exception, trouble: api_errors.ApiTrouble) -> float:
        """A pass the API server cut short (restart, network, 5xx, 429, a concurrent writer):
        not a bug, so no traceback; the first pass of an outage warns, the others wait
        quietly. The Node is looked at again 0.5-1 s later, then twice as late each time, up to
        ``errorRequeueSeconds``, and never before the server's ``Retry-After``: an outage of a
        few seconds costs its Nodes a few seconds, not a fixed 30."""
        delay = max(self._api_away.next(name), trouble.retry_after or 0.0)
        if not trouble.outage:
            log.info("node %s: %s; again in %.1f s", name, _first_line(exc), delay)
            return delay
        level = logging.DEBUG if self._api_warned else logging.WARNING
        self._api_warned = True
        why = f"{type(exc).__name__}: {_first_line(exc)}"
        log.log(
            level,
            "node %s: Kubernetes API server unavailable (%s); again in %.1f s",
            name,
            why,
            delay,
        )
        return delay

    async def _pass(self, name: str) -> tuple[str, float | None]:
        """One pass: the result (for the metrics) and the requeue delay."""
        node = await self.kube.get_node(name)
        if node is None or node["metadata"].get("deletionTimestamp"):
            return metrics.RESULT_REMOVED, await self.node_gone(name)
        if not self.config.owns(node["metadata"].get("labels")):
            log.debug("node %s does not match nodeSelector; not managed", name)
            return metrics.RESULT_IGNORED, None
        wait = self._ready_gate(node)
        if wait is not None:
            return metrics.RESULT_WAITING, wait
        try:
            instance = await self._instance(node)
            caps = await self.cloud.instance_type_caps(instance.instance_type)
            eris = ensure_eris(
                self.cloud,
                instance,
                caps,
                manage_non_owned=self.config.manage_non_owned_enis,
                token_salt=str(node["metadata"].get("uid", "")),
            )
            jumbo_read: bool | CloudError = False
            if not caps.supports_eri:  # no object will be written: no jumbo-frame read
                result = await eris
            else:  # the read does not depend on the ERIs: the pass waits for the slower one
                result, jumbo_read = await both(eris, self._read_jumbo(name, instance))
        except Skip:
            return metrics.RESULT_FAILED, self.config.error_requeue_seconds
        except CloudError as exc:
            await self.events.record(node, "Warning", REASON_CLOUD_FAILED, str(exc))
            return metrics.RESULT_FAILED, self.config.error_requeue_seconds
        if not result.supported:
            return metrics.RESULT_UNSUPPORTED, await self._not_supported(node, instance, result)
        return await self._write(node, instance, result, jumbo_read)

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
            return await self._remove(current, node, node_gone=False)
        return None

    async def _write(
        self,
        node: Mapping[str, Any],
        instance: Instance,
        result: EnsureResult,
        jumbo_read: bool | CloudError,
    ) -> tuple[str, float]:
        name = node["metadata"]["name"]
        current = await self.kube.get_device(name)
        before = crd.parse(current) if current is not None else None
        if current is not None and before is not None and before.deleting:
            # Deleted by a person while the Node lives: let it go; the next pass recreates it.
            await self.kube.drop_finalizer(current)
            self._forget(name)
            return metrics.RESULT_PENDING, self.config.pending_requeue_seconds
        jumbo = await self._jumbo(node, jumbo_read, before)
        await device_report.report(self.events, node, result, before)
        devices = device_report.spec_devices(instance, result)
        statuses = device_report.statuses(result, before)
        if current is None:
            obj = crd.build(name, node["metadata"]["uid"], instance.id, devices, jumbo.value)
            current = await self.kube.create_device(obj)
            log.info("created ERdmaDevice %s with %d devices", name, len(devices))
        else:
            spec = crd.spec_body(devices, jumbo.value)
            labels = {crd.LABEL_INSTANCE_ID: instance.id, crd.LABEL_NODE_NAME: name}
            meta = current["metadata"]
            if current.get("spec") != spec or any(
                (meta.get("labels") or {}).get(k) != v for k, v in labels.items()
            ):
                await self.kube.patch_device(name, {"metadata": {"labels": labels}, "spec": spec})
        status = device_report.status_body(statuses, result)
        if current.get("status") != status:
            await self.kube.patch_device_status(name, status)
        self.metrics.set_node_eris(name, (s.status for s in statuses))
        if result.ready and jumbo.known:
            return metrics.RESULT_READY, self.config.reverify_interval_seconds
        if not jumbo.known or result.problem or any(s.status == crd.FAILED for s in statuses):
            return metrics.RESULT_FAILED, self.config.error_requeue_seconds
        if any(d.cloud_error for d in result.devices):  # retried at the usual pace
            self._pending.end(name)
            return metrics.RESULT_PENDING, self.config.pending_requeue_seconds
        # Only attaching: an attach takes seconds, so a fixed ``pendingRequeueSeconds`` (10)
        # kept a Node's devices from kubelet for up to that long after they were usable. Look
        # again soon, then less and less often (ATTACH_RECHECK).
        delay = self._pending.next(name)
        return metrics.RESULT_PENDING, delay

    async def _read_jumbo(self, name: str, instance: Instance) -> bool | CloudError:
        """The instance's jumbo-frame setting, or why ECS could not say.

        The setting is read from ECS (DescribeInstanceAttribute, one call per instance: the
        API has no batch form) on a Node's first pass and then at most once per
        ``reverifyIntervalSeconds`` for the same instance, the Ready re-verify cadence; the
        passes between (an ERI attaching, a status update) reuse the value that read returned
        (not the object's, which a person may have edited).
        """
        read_for, value, read_at = self._jumbo_read.get(name, ("", False, -math.inf))
        age = time.monotonic() - read_at
        if read_for == instance.id and age < self.config.reverify_interval_seconds:
            return value
        try:
            value = await self.cloud.jumbo_frame(instance.id)
        except CloudError as exc:
            return exc
        self._jumbo_read[name] = (instance.id, value, time.monotonic())
        return value

    async def _jumbo(
        self, node: Mapping[str, Any], read: bool | CloudError, before: crd.ERdmaDevice | None
    ) -> Jumbo:
        """The jumbo-frame setting to write; when ECS could not say, the value the object holds.

        A failed read (throttled, 5xx, denied) never turns a known setting into a guess; only a
        new object, which has no value yet, starts with False (as the reference does) until a
        read succeeds.
        """
        if not isinstance(read, CloudError):
            return Jumbo(read, True)
        if before is not None:
            message = f"cannot read jumbo-frame setting, keeping {before.jumbo_frame}: {read}"
            await self.events.record(node, "Warning", REASON_CLOUD_FAILED, message)
            return Jumbo(before.jumbo_frame, True)
        message = f"cannot read jumbo-frame setting, assuming off until it can: {read}"
        await self.events.record(node, "Warning", REASON_CLOUD_FAILED, message)
        return Jumbo(False, False)

    async def node_gone(self, name: str) -> float | None:
        """The Node is deleted: clean up its ERIs (as far as allowed), then remove its object."""
        current = await self.kube.get_device(name)
        if current is None:
            self._forget(name)
            return None
        ref = {"metadata": {"name": name, "uid": _owner_uid(current)}}
        return await self._remove(current, ref, node_gone=True)

    async def _cleanup(self, instance_id: str, node_gone: bool) -> CleanupResult:
        if node_gone and not self.config.cleanup_running_instances:
            return await cleanup_for_gone_node(self.cloud, self.kube, instance_id)
        return await cleanup_eris(self.cloud, instance_id)

    async def _remove(
        self, current: Mapping[str, Any], node: Mapping[str, Any], *, node_gone: bool
    ) -> float | None:
        """Clean up the object's ERIs, then drop the finalizer and delete the object.

        For a deleted Node, ``cleanup_for_gone_node`` decides which ERIs go (ours, once the
        instance is gone); for an instance type without eRDMA, all of ours go. Returns a
        requeue delay while ENIs are still detaching or a cloud call failed; the object (and
        its finalizer) stays until the cleanup is complete, so nothing leaks when the
        controller restarts half-way.
        """
        name = current["metadata"]["name"]
        instance_id = crd.parse(current).instance_id
        ours = crd.FINALIZER in (current["metadata"].get("finalizers") or [])
        if ours and self.config.cleanup_on_node_delete and instance_id:
            try:
                cleaned = await self._cleanup(instance_id, node_gone)
            except CloudError as exc:
                await self.events.record(node, "Warning", "ERICleanupFailed", str(exc))
                return self.config.error_requeue_seconds
            if cleaned.deleted:
                message = f"deleted {', '.join(cleaned.deleted)}"
                await self.events.record(node, "Normal", "ERIDeleted", message)
            if cleaned.kept:
                log.info(
                    "node %s is gone but instance %s still runs: keeping its ERIs %s",
                    name,
                    instance_id,
                    ", ".join(cleaned.kept),
                )
            if cleaned.errors:
                message = "; ".join(cleaned.errors)
                await self.events.record(node, "Warning", "ERICleanupFailed", message)
            if not cleaned.done:
                return self.config.pending_requeue_seconds
        await self.kube.drop_finalizer(current)
        await self.kube.delete_device(name)
        self._forget(name)
        log.info("removed ERdmaDevice %s", name)
        return None


def _first_line(exc: BaseException) -> str:
    """An error's message, cut to its first line (a proxy's 503 page can be long)."""
    return (str(exc).splitlines() or [""])[0][:200]


@dataclass(frozen=True)
class Jumbo:
    """The jumbo-frame setting to write, and whether ECS (or the object) really knows it."""

    value: bool
    known: bool


def _owner_uid(obj: Mapping[str, Any]) -> str:
    refs = obj["metadata"].get("ownerReferences") or []
    return next((str(r.get("uid", "")) for r in refs if r.get("kind") == "Node"), "")
