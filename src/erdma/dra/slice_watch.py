"""A watch on this driver's own slices, so that what others delete or change is put back.

The kubelet deletes every ResourceSlice of its node when it starts, and a driver's slices 30 s
after the driver's registration goes away; an administrator may delete or edit one. The
device list does not change when that happens, so only a watch tells the publisher that the
node no longer offers its devices. As the upstream kubeletplugin helper's resourceslice
controller does, the watch covers only this node's slices of this driver (field selectors
`spec.nodeName` and `spec.driver`) and asks the publisher to apply its last device list again
when its slice is deleted, written by anyone else (a resourceVersion other than the one its own
apply returned) save another agent of this driver publishing a newer pool generation (a rolling
update's new agent, erdma.dra.slices), or joined by another slice of the same node and driver.

Every watch starts from a list, so what happened while none was open is seen too: a slice
missing from the list is restored. An expired resourceVersion (410) or a broken connection
ends the watch; it lists again after a pause of the shared `Backoff`, which grows while
failures repeat, so a watch that keeps failing never turns into a loop of requests.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.resource_v1 import ResourceSlice

from erdma.aio import Backoff
from erdma.dra.slices import SlicePublisher, describe_error

log = logging.getLogger(__name__)


def relist_backoff() -> Backoff:
    """Pauses before listing again after a failed watch: 0.5 s doubling up to 30 s (client-go's
    reflector uses 0.8 s to 30 s), jittered so the agents of many nodes do not list at once."""
    return Backoff(initial=0.5, maximum=30.0)


def _name(obj: ResourceSlice) -> str:
    return (obj.metadata.name if obj.metadata else None) or ""


class SliceWatch:
    """Lists and watches this node's slices of this driver; tells `publisher` what drifted."""

    def __init__(self, publisher: SlicePublisher, backoff: Backoff | None = None) -> None:
        self.client: AsyncClient = publisher.client
        self.publisher = publisher
        self.backoff = backoff or relist_backoff()
        self._fields: dict[str, Any] = {
            "spec.nodeName": publisher.node,
            "spec.driver": publisher.driver,
        }
        self._failure = ""

    async def run(self) -> None:
        """List and watch forever; a failure is logged once and followed by a backoff pause.

        A watch that lasted longer than the longest pause counts as a success: the next
        failure (the 410 a quiet watch meets when the server has compacted its history) lists
        again after the shortest pause, not after the one an outage long ago grew to.
        """
        loop = asyncio.get_running_loop()
        await self.publisher.published.wait()  # until then the publisher's next write suffices
        while True:
            started = loop.time()
            try:
                await self._list_and_watch()
            except (httpx.HTTPError, OSError) as exc:  # ApiError is an HTTPError
                if loop.time() - started > self.backoff.maximum:
                    self.backoff.reset()
                self._failed(exc)
            await asyncio.sleep(self.backoff.next_delay())

    async def _list_and_watch(self) -> None:
        listing = self.client.list(ResourceSlice, fields=self._fields)
        present = [s async for s in listing]
        if self._failure:
            log.info("watching this node's ResourceSlices again", extra={"after": self._failure})
            self._failure = ""
        if self.publisher.name not in {_name(s) for s in present}:
            self._drifted("is missing")
        for obj in present:
            self._observe("ADDED", obj)
        stream = self.client.watch(
            ResourceSlice, fields=self._fields, resource_version=listing.resourceVersion
        )
        async for kind, obj in stream:
            self._observe(kind, obj)

    def _observe(self, kind: str, obj: ResourceSlice) -> None:
        name = _name(obj)
        if name != self.publisher.name:
            if kind != "DELETED":
                self._drifted(f"has a second slice of this node and driver, {name}")
        elif kind == "DELETED":
            self._drifted("was deleted")
        elif self.publisher.written_by_others(
            obj.metadata.resourceVersion if obj.metadata else None,
            obj.spec.pool.generation if obj.spec else None,
        ):
            self._drifted("was written by another client")

    def _drifted(self, what: str) -> None:
        log.info(f"ResourceSlice {what}; restoring it", extra={"slice": self.publisher.name})
        self.publisher.restore()

    def _failed(self, exc: BaseException) -> None:
        """Log a failure once until the API server answers again; an expired resourceVersion
        (410) is routine for a quiet watch and only logged at debug level."""
        error = describe_error(exc)
        if isinstance(exc, ApiError) and exc.status.code == 410:
            log.debug("ResourceSlice watch expired; listing again", extra={"error": error})
            return
        if error != self._failure:
            log.warning("ResourceSlice watch failed; listing again", extra={"error": error})
        self._failure = error
