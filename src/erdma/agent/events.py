"""Events on this node from the agent: driver readiness and device health.

`kubectl describe node` is where people look first; the agent puts there what it already logs
when a node cannot serve eRDMA (driver missing or busy, with the remedy) and when a device turns
Unhealthy or recovers. Without API access (no node name, no in-cluster config) the agent says so
once and carries on: Events are a courtesy, never a reason to stop serving kubelet.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the Kubernetes client is loaded only by an agent that can post Events
    from lightkube import AsyncClient

    from erdma.kube.events import EventType

log = logging.getLogger(__name__)

COMPONENT = "erdma-agent"


@dataclass(frozen=True)
class NodeEvent:
    type: EventType
    reason: str
    message: str


class NodeEvents:
    """A queue of Events for one Node, posted in the background in order."""

    def __init__(
        self,
        node_name: str,
        kubeconfig: str | None,
        component: str = COMPONENT,
        client: Callable[[], AsyncClient] | None = None,
    ) -> None:
        """``client``: the process's shared client (its owner closes it); None makes one of
        its own for as long as Events are posted."""
        self.node_name = node_name
        self.kubeconfig = kubeconfig
        self.component = component
        self._shared = client
        self._queue: asyncio.Queue[NodeEvent] = asyncio.Queue(maxsize=1000)
        self._dropping = False

    @property
    def possible(self) -> bool:
        in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        return bool(self.node_name) and (bool(self.kubeconfig) or in_cluster)

    def emit(self, type_: EventType, reason: str, message: str) -> None:
        """Queue an Event (from any code on the loop); dropped when the queue is full."""
        if self._queue.full():
            if not self._dropping:
                log.warning("node Event queue full; dropping Events until it drains")
            self._dropping = True
            return
        self._dropping = False
        self._queue.put_nowait(NodeEvent(type_, reason, message))

    async def post_forever(self) -> None:
        if not self.possible:
            log.info("node Events off: no node name or no API access (kubeconfig/in-cluster)")
            return
        from erdma.kube.client import KubeApi, new_client
        from erdma.kube.events import EventRecorder

        client = self._shared() if self._shared is not None else new_client(self.kubeconfig)
        try:
            recorder = EventRecorder(client, component=self.component)
            node = await KubeApi(client).get_node(self.node_name) or {
                "metadata": {"name": self.node_name}
            }
            while True:
                event = await self._queue.get()
                try:
                    await recorder.record(node, event.type, event.reason, event.message)
                finally:
                    self._queue.task_done()
        finally:
            if self._shared is None:
                await client.close()

    async def drain(self, timeout: float) -> None:
        """Wait until every queued Event is posted, at most ``timeout`` seconds: a program that
        exits after its work (`erdma driver prepare`) posts what it said first."""
        if not self.possible:
            return
        try:
            await asyncio.wait_for(self._queue.join(), timeout)
        except TimeoutError:
            log.warning(
                "node Events not all posted before exiting",
                extra={"left": self._queue.qsize(), "waited_seconds": timeout},
            )
