"""What happens to a Node's ERIs once the Node is gone, and the sweep that finds forgotten ones.

Deleting a Node does not mean its instance is gone: a Node is also deleted to re-register a
kubelet, or by mistake, while the instance keeps running with its ERIs attached. So the ERIs
this controller created (tagged ``creator=alibabacloud-erdma-controller``) are deleted only
when ECS says their instance is gone (released: not found); while it runs, the attached ones
stay and are adopted again when a Node for it returns, and only ERIs that were never attached
are deleted. With ``cleanupOnNodeDelete`` off nothing is ever deleted.

``cleanup_for_gone_node`` applies that rule when the Node's ERdmaDevice object goes.
``OrphanSweeper`` applies it to ERIs no object stands for: those left by a controller killed
while a create or attach was in flight, whose Node was deleted before it restarted, and those
of an instance released after its Node was deleted. It runs at start and then periodically.
An unattached ERI of a running instance is deleted only when the next sweep still finds it
orphaned, so a create that another controller (another cluster in the same account) is about
to attach is left alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from erdma.controller.cloud import (
    CREATOR_TAG_KEY,
    CREATOR_TAG_VALUE,
    ENI_AVAILABLE,
    INSTANCE_ID_TAG_KEY,
    CloudApi,
    CloudError,
    Eni,
    ErrorKind,
)
from erdma.controller.config import ControllerConfig
from erdma.controller.eri import CleanupResult, cleanup_eris
from erdma.controller.nodes import node_index
from erdma.kube import crd
from erdma.kube.client import KubeApi

log = logging.getLogger(__name__)


async def cleanup_for_gone_node(cloud: CloudApi, kube: KubeApi, instance_id: str) -> CleanupResult:
    """The ERIs of a Node that is gone: all of ours when the instance is gone too, only the
    unattached ones while it runs, none while another Node stands for it."""
    instance = await cloud.find_instance(instance_id=instance_id)
    if instance is not None and (await node_index(kube)).has(instance_id, instance):
        return CleanupResult((), (), ())
    return await cleanup_eris(cloud, instance_id, keep_attached=instance is not None)


@dataclass(frozen=True)
class SweepResult:
    """One sweep: ``kept`` ERIs stay attached to a running instance; ``waiting`` ones are
    unattached and are deleted by the next sweep if still orphaned."""

    deleted: tuple[str, ...] = ()
    detaching: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


def _instance_of(eni: Eni) -> str:
    return eni.instance_id or eni.tags.get(INSTANCE_ID_TAG_KEY, "")


def _object_instance(obj: Mapping[str, Any]) -> str:
    try:
        return crd.parse(obj).instance_id
    except crd.CrdError:  # a malformed object still holds its instance's ERIs
        return str(((obj.get("metadata") or {}).get("labels") or {}).get(crd.LABEL_INSTANCE_ID))


@dataclass
class OrphanSweeper:
    """Finds ERIs of ours that no Node or ERdmaDevice stands for and applies the Node-gone rule."""

    kube: KubeApi
    cloud: CloudApi
    config: ControllerConfig
    _suspects: set[str] = field(default_factory=set)  # unattached orphans seen by the last sweep
    _reported: dict[str, frozenset[str]] = field(default_factory=dict)

    async def sweep(self) -> SweepResult:
        """One pass over every ERI tagged by this controller in the region."""
        if not self.config.cleanup_on_node_delete:
            return SweepResult()
        creator = {CREATOR_TAG_KEY: CREATOR_TAG_VALUE}
        ours = [e for e in await self.cloud.list_enis_by_tags(creator) if not e.is_primary]
        # Listed after the ERIs, so an ERI created for a Node that exists now is seen with it.
        nodes = await node_index(self.kube)
        objects = {_object_instance(o) async for o in self.kube.iter_devices()}
        by_instance: dict[str, list[Eni]] = {}
        for eni in ours:
            if (instance_id := _instance_of(eni)) and instance_id not in objects:
                by_instance.setdefault(instance_id, []).append(eni)
        results: list[SweepResult] = []
        for instance_id, enis in sorted(by_instance.items()):
            if nodes.has(instance_id):
                continue
            instance = await self.cloud.find_instance(instance_id=instance_id)
            if instance is not None and nodes.has(instance_id, instance):
                continue
            if instance is None or self.config.cleanup_running_instances:
                results.append(await self._delete_all(instance_id))
            else:
                results.append(await self._instance_runs(instance_id, enis))
        waiting = {w for r in results for w in r.waiting}
        self._suspects = waiting
        return SweepResult(
            deleted=tuple(d for r in results for d in r.deleted),
            detaching=tuple(d for r in results for d in r.detaching),
            kept=tuple(k for r in results for k in r.kept),
            waiting=tuple(sorted(waiting)),
            errors=tuple(e for r in results for e in r.errors),
        )

    async def _delete_all(self, instance_id: str) -> SweepResult:
        """The instance is released, or runs and `cleanupRunningInstances` lets its ERIs go."""
        cleaned = await cleanup_eris(self.cloud, instance_id)
        if cleaned.deleted or cleaned.detaching:
            log.info(
                "no Node stands for instance %s: deleting its ERIs %s",
                instance_id,
                ", ".join(cleaned.deleted + cleaned.detaching),
            )
        return SweepResult(cleaned.deleted, cleaned.detaching, errors=cleaned.errors)

    async def _instance_runs(self, instance_id: str, enis: list[Eni]) -> SweepResult:
        attached = frozenset(e.id for e in enis if e.status != ENI_AVAILABLE)
        if attached and self._reported.get(instance_id) != attached:
            log.info(
                "instance %s still runs but no Node stands for it: keeping its ERIs %s; a Node "
                "for it adopts them again, and they are deleted once the instance is released",
                instance_id,
                ", ".join(sorted(attached)),
            )
        self._reported[instance_id] = attached
        deleted: list[str] = []
        waiting: list[str] = []
        errors: list[str] = []
        for eni in sorted((e for e in enis if e.status == ENI_AVAILABLE), key=lambda e: e.id):
            if eni.id not in self._suspects:
                waiting.append(eni.id)
                continue
            try:
                await self.cloud.delete_eni(eni.id)
            except CloudError as exc:
                if exc.kind is not ErrorKind.NOT_FOUND:
                    errors.append(f"{eni.id}: {exc}")
                    waiting.append(eni.id)
                continue
            deleted.append(eni.id)
        if deleted:
            log.info(
                "deleted ERIs %s: created for instance %s, never attached, and no Node stands "
                "for it",
                ", ".join(deleted),
                instance_id,
            )
        kept = tuple(sorted(attached))
        return SweepResult(tuple(deleted), (), kept, tuple(waiting), tuple(errors))

    async def run(self, interval: float) -> None:
        """Sweep now and then every ``interval`` seconds until cancelled; a failure is logged
        once (until a sweep succeeds or fails with another error code) and the next sweep tries
        again."""
        last_failure = ""
        while True:
            try:
                result = await self.sweep()
                for error in result.errors:
                    log.warning("orphan sweep: %s", error)
                last_failure = ""
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an API or cloud outage must not end the sweeps
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise asyncio.CancelledError from exc  # a library turned the cancel into this
                failure = f"{type(exc).__name__} {getattr(exc, 'code', '') or exc}"
                if failure != last_failure:
                    log.warning("orphan sweep failed (%s); trying again in %gs", exc, interval)
                last_failure = failure
            await asyncio.sleep(interval)
