"""Publishing this node's ResourceSlice: one pool per node, server-side apply, owned by the Node.

The slice is named `<node>-<driver>` so server-side apply can always address it; the pool is
the node name, and `pool.generation` grows by one on every change of the device list, which
tells the scheduler to drop older slices of the pool. A starting agent takes over the slice its
predecessor left: when it already holds exactly the devices the new agent publishes (with the
same owner), the generation stays and the apply changes nothing, so a restart or rolling update
leaves no moment without a slice and the scheduler sees no change. During a rolling update two
agents publish the same slice; a write by the other one with a higher pool generation is left
alone rather than restored, so the newer agent takes the pool over and the two never undo each
other's writes. The owner reference to the Node lets the garbage collector remove the
slice with the Node. Every list and delete is filtered by `spec.nodeName` and `spec.driver`, so
the driver never touches another node's or another driver's slices.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any, cast

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from erdma.aio import Backoff
from erdma.dra.names import MAX_DEVICES_PER_SLICE

log = logging.getLogger(__name__)

FIELD_MANAGER = "erdma-dra-driver"
API_VERSION = "resource.k8s.io/v1"
#: seconds without a restore after which the next one is made at once again
RESTORE_QUIET = 30.0


def slice_name(node: str, driver: str) -> str:
    """`<node>-<driver>`, shortened with a hash when it would pass the 253-character limit."""
    name = f"{node}-{driver}"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{node[: 253 - len(driver) - 12]}-{digest}-{driver}"


def build_slice(
    node: str, node_uid: str, driver: str, generation: int, devices: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The whole ResourceSlice this driver wants for `node` (what server-side apply sends)."""
    if len(devices) > MAX_DEVICES_PER_SLICE:
        raise ValueError(
            f"{len(devices)} devices on node {node!r}: one ResourceSlice holds at most "
            f"{MAX_DEVICES_PER_SLICE}"
        )
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(node, driver),
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node,
                    "uid": node_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [dict(d) for d in devices],
        },
    }


def restore_backoff() -> Backoff:
    """Pauses before a restore that follows another within `RESTORE_QUIET`: a client that keeps
    undoing the slice (or a second driver publishing other devices under the same name) meets
    pauses from 0.5 s doubling up to 30 s, never a loop of writes answering writes."""
    return Backoff(initial=0.5, maximum=RESTORE_QUIET)


def describe_error(exc: BaseException) -> str:
    """An API error's code and message, else the exception's type and text, for a log line."""
    if isinstance(exc, ApiError):
        return f"{exc.status.code}: {exc.status.message}"
    return f"{type(exc).__name__}: {exc}"


class SlicePublisher:
    """Keeps this node's slice equal to the latest device list, retrying with backoff.

    `set_devices` is cheap and synchronous (called from the agent's rescan); `run` does the API
    calls, coalescing bursts of changes into one apply. `restore` asks for the last list to be
    applied again although it did not change: the slice watch (erdma.dra.slice_watch) saw the
    API server's copy deleted or changed by another writer, which the device list cannot tell.
    """

    def __init__(self, client: AsyncClient, node: str, driver: str) -> None:
        if not node:
            raise ValueError("nodeName is empty: the DRA driver needs this node's name (NODE_NAME)")
        self.client = client
        self.node = node
        self.driver = driver
        self.name = slice_name(node, driver)
        self.generation = 0
        self.applied: list[dict[str, Any]] | None = None
        #: the slice's resourceVersion as our last apply left it: any other is someone else's
        self.resource_version: str | None = None
        self._wanted: list[dict[str, Any]] | None = None
        self._restore = False
        #: versions of our slice the watch reported while an apply was under way (else None)
        self._seen_during_write: list[str | None] | None = None
        self._node_uid: str | None = None
        self._changed = asyncio.Event()
        self.synced = asyncio.Event()
        #: set once a slice has been written: from then on there is something to restore
        self.published = asyncio.Event()
        self._restore_pace = restore_backoff()
        self._last_restored = float("-inf")

    def set_devices(self, devices: Sequence[Mapping[str, Any]]) -> bool:
        """Adopt a new device list; True when it differs from the last one asked for."""
        wanted = [dict(d) for d in devices]
        if wanted == self._wanted:
            return False
        self._wanted = wanted
        self.synced.clear()
        self._changed.set()
        return True

    def restore(self) -> None:
        """Apply the wanted devices again: the API server's copy is gone or was changed.

        The Node's uid is read again first: a slice whose owner is a deleted Node would be
        removed by the garbage collector as soon as it is written.
        """
        self._restore = True
        self._node_uid = None
        self.synced.clear()
        self._changed.set()

    def written_by_others(
        self, resource_version: str | None, generation: int | None = None
    ) -> bool:
        """Whether our slice at `resource_version`, as the watch reports it, is not our write
        (nor that of a newer instance of this driver: a higher pool `generation`).

        The watch event of our own apply can arrive before the apply's answer, so while an
        apply is under way the versions reported are kept, and judged by its answer.
        """
        if self._seen_during_write is not None:
            self._seen_during_write.append(resource_version)
            return False
        if resource_version == self.resource_version:
            return False
        if generation is not None and generation > self.generation:
            log.info(
                "ResourceSlice published with a newer pool generation by another instance "
                "of this driver; leaving it to that one",
                extra={"slice": self.name, "generation": generation},
            )
            self.generation, self.resource_version = generation, resource_version
            return False
        return True

    async def run(self) -> None:
        """Apply every change, forever; failures are logged and retried with backoff."""
        backoff = Backoff(initial=0.2, maximum=30.0)
        while True:
            await self._changed.wait()
            self._changed.clear()
            if self._restore and self._wanted == self.applied:
                await self._pace_restore()
            try:
                await self.sync_once()
                backoff.reset()
            except (httpx.HTTPError, OSError, LookupError) as exc:  # ApiError is an HTTPError
                self._changed.set()  # the wanted list is still to be applied
                delay = backoff.next_delay()
                log.warning(
                    f"ResourceSlice {self.name} not published; retrying in {delay:.2g}s",
                    extra={"error": describe_error(exc)},
                )
                await asyncio.sleep(delay)

    async def _pace_restore(self) -> None:
        """Wait before a restore that comes soon after the last one (see `restore_backoff`)."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._last_restored > RESTORE_QUIET:
            self._restore_pace.reset()
            return
        delay = self._restore_pace.next_delay()
        log.warning(
            f"ResourceSlice {self.name} keeps being deleted or changed by another client; "
            f"restoring it in {delay:.2g}s"
        )
        await asyncio.sleep(delay)

    async def sync_once(self) -> None:
        """Apply the wanted devices now (no-op when already applied and nothing to restore)."""
        wanted = self._wanted
        if wanted is None or (wanted == self.applied and not self._restore):
            self.synced.set()
            return
        self._restore = False
        self._seen_during_write = []
        try:
            await self._apply(wanted)
        except BaseException:
            self._restore = True  # what the API server holds after a failed write is unknown
            raise
        finally:
            seen, self._seen_during_write = self._seen_during_write, None
        if self.resource_version in seen and seen[-1] != self.resource_version:
            # events come in order: a version after our own is another client's write
            log.info(
                "ResourceSlice written by another client; restoring it", extra={"slice": self.name}
            )
            self.restore()
        if self._wanted == wanted and not self._restore:
            self.synced.set()

    async def _apply(self, wanted: list[dict[str, Any]]) -> None:
        """Server-side apply of `wanted`; a new pool generation only when the list changed."""
        node_uid = self._node_uid or await self._node_uid_now()
        self._node_uid = node_uid
        taken_over = False
        if self.applied is None:  # the first write of this process continues the pool's count
            self.generation, taken_over = await self._pool_now(wanted, node_uid)
        restoring = wanted == self.applied
        if not (restoring or taken_over):
            self.generation += 1
        body = build_slice(self.node, node_uid, self.driver, self.generation, wanted)
        obj = cast(ResourceSlice, ResourceSlice.from_dict(body))
        written = await self.client.apply(obj, field_manager=FIELD_MANAGER, force=True)
        self.resource_version = written.metadata.resourceVersion if written.metadata else None
        await self._delete_others()
        self.applied = wanted
        self.published.set()
        if restoring:
            self._last_restored = asyncio.get_running_loop().time()
        action = "restored" if restoring else "taken over unchanged" if taken_over else "published"
        log.info(
            f"ResourceSlice {action}",
            extra={
                "slice": self.name,
                "generation": self.generation,
                "devices": [d["name"] for d in wanted],
            },
        )

    async def _node_uid_now(self) -> str:
        try:
            node = await self.client.get(Node, self.node)
        except ApiError as exc:
            if exc.status.code == 404:
                raise LookupError(f"Node {self.node!r} does not exist (yet)") from None
            raise
        assert node.metadata is not None and node.metadata.uid is not None
        return node.metadata.uid

    async def own_slices(self) -> list[ResourceSlice]:
        """This node's slices of this driver, whatever their name."""
        fields: dict[str, Any] = {"spec.nodeName": self.node, "spec.driver": self.driver}
        return [s async for s in self.client.list(ResourceSlice, fields=fields)]

    async def _pool_now(self, wanted: list[dict[str, Any]], node_uid: str) -> tuple[int, bool]:
        """The pool's generation, and whether this node's only slice of this driver already is
        exactly what `wanted` gives at that generation (a predecessor's, to take over as is)."""
        found = await self.own_slices()
        generation = max((s.spec.pool.generation for s in found), default=0)
        if [s.metadata.name if s.metadata else None for s in found] != [self.name]:
            return generation, False
        expected = build_slice(self.node, node_uid, self.driver, generation, wanted)
        current = found[0].to_dict()
        same = (
            current.get("spec") == expected["spec"]
            and current["metadata"].get("ownerReferences")
            == expected["metadata"]["ownerReferences"]
        )
        return generation, same

    async def _delete_others(self) -> None:
        """Slices of this node and driver under another name (another naming, a crash)."""
        for stale in await self.own_slices():
            name = stale.metadata.name if stale.metadata else None
            if name and name != self.name:
                await self._delete(name)

    async def delete_all(self) -> list[str]:
        """Withdraw every slice of this node and driver (agent uninstall); returns the names."""
        names = [s.metadata.name for s in await self.own_slices() if s.metadata and s.metadata.name]
        for name in names:
            await self._delete(name)
        self.applied = None
        self.resource_version = None
        self._node_uid = None
        if names:
            log.info("ResourceSlices deleted", extra={"slices": names})
        return names

    async def _delete(self, name: str) -> None:
        try:
            await self.client.delete(ResourceSlice, name)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
