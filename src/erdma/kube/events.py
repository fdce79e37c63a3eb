"""Kubernetes Events on the Node for every cloud action and failure of the controller.

`kubectl describe node` is where people look first, so each ERI created, attached, converted,
re-attached, cleaned up, and each failure (with the ECS error and hint) is reported there. The
same reason and message on the same Node within one process bumps ``count`` on the existing
Event instead of creating a new one, as the kubelet's recorder does. Recording never raises: a
missing ``events`` permission must not stop reconciliation, it is logged once instead.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import uuid
from collections.abc import Mapping
from typing import Any, Literal

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event
from lightkube.types import PatchType

log = logging.getLogger(__name__)

COMPONENT = "erdma-controller"
# Events about cluster-scoped objects live in "default", as kubelet and kube-controller do it.
EVENT_NAMESPACE = "default"
EventType = Literal["Normal", "Warning"]
MAX_REMEMBERED = 4096  # aggregation memory; cleared when full, at worst one duplicate Event


class EventRecorder:
    """Posts core/v1 Events whose involvedObject is a Node."""

    def __init__(self, client: AsyncClient, component: str = COMPONENT) -> None:
        self.client = client
        self.component = component
        self.instance = f"{socket.gethostname()}-{os.getpid()}"
        self._seen: dict[tuple[str, str, str], tuple[str, int]] = {}
        self._warned = False

    async def record(
        self, node: Mapping[str, Any], type_: EventType, reason: str, message: str
    ) -> None:
        """Record an Event on ``node`` (a Node dict); failures are logged, never raised."""
        meta = node.get("metadata") or {}
        name, uid = str(meta.get("name", "")), str(meta.get("uid", ""))
        log.log(
            logging.WARNING if type_ == "Warning" else logging.INFO,
            "node %s: %s: %s",
            name,
            reason,
            message,
        )
        now = datetime.datetime.now(datetime.UTC)
        key = (uid or name, reason, message)
        if len(self._seen) > MAX_REMEMBERED:
            self._seen.clear()
        try:
            if key in self._seen:
                event_name, count = self._seen[key]
                await self.client.patch(
                    Event,
                    event_name,
                    {"count": count + 1, "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ")},
                    namespace=EVENT_NAMESPACE,
                    patch_type=PatchType.MERGE,
                )
                self._seen[key] = (event_name, count + 1)
                self._recovered()
                return
            event = Event(
                metadata=ObjectMeta(
                    name=f"{name}.{uuid.uuid4().hex[:16]}", namespace=EVENT_NAMESPACE
                ),
                involvedObject=ObjectReference(apiVersion="v1", kind="Node", name=name, uid=uid),
                reason=reason,
                message=message[:1024],
                type=type_,
                count=1,
                firstTimestamp=now,
                lastTimestamp=now,
                source=EventSource(component=self.component),
                reportingComponent=self.component,
                reportingInstance=self.instance,
            )
            created = await self.client.create(event)
            assert created.metadata is not None and created.metadata.name is not None
            self._seen[key] = (created.metadata.name, 1)
            self._recovered()
        except (httpx.HTTPError, OSError) as exc:  # ApiError, and the API server being away
            self._seen.pop(key, None)
            refused = isinstance(exc, ApiError) and exc.status.code == 403
            hint = " (the events RBAC rule is missing)" if refused else ""
            level = logging.DEBUG if self._warned else logging.WARNING
            self._warned = True
            log.log(level, "cannot record an Event on node %s%s: %s", name, hint, exc)

    def _recovered(self) -> None:
        """After failures, say once that Events get through again; the next outage warns anew."""
        if self._warned:
            log.info("recording Events again")
        self._warned = False
