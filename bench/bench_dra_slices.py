"""How soon the DRA driver restores its ResourceSlice after someone else deletes or changes it.

Run: `.venv/bin/python -m bench.bench_dra_slices --rounds 20`.

The tests (tests/integration/test_dra_slice_restored.py, tests/e2e/
test_dra_slice_back_after_kubelet_restart.py) check that the slice comes back; the time is
measured here. The real `DraDriver` publishes a default fixture host's two devices to
kube-testserver. Each round and kind starts a fresh driver on a fresh Node (the driver paces a
restore that follows another within 30 s, on purpose), and a separate watcher (the admin
client, its own watch on this node's slices) stamps the events it receives:

* deleted: the kubelet stand-in deletes the node's slices as a starting kubelet does; from the
  DELETED event to the ADDED event of the restored slice.
* changed: another client merge-patches the slice's device list to empty; from that MODIFIED
  event to the next one, which carries the devices again.

Both stamps come from the same watch, so the figure is the driver's reaction (its own watch
event, a Node read, the apply) plus one watch delivery, without the watcher's own latency.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from lightkube import AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice
from lightkube.types import PatchType

from erdma.dra.names import DRIVER_NAME
from erdma.dra.slices import slice_name
from erdma.sim import fakehost
from erdma.sim.dra_kubelet import delete_node_slices
from tests.fakes.kubeapi import KubeApiServer
from tests.integration.dra_support import new_driver

Events = asyncio.Queue[tuple[float, str, int]]


async def _watch(client: AsyncClient, node: str, events: Events) -> None:
    """(receipt time, event type, device count) for every event on ``node``'s slices."""
    async for kind, obj in client.watch(ResourceSlice, fields={"spec.nodeName": node}):
        await events.put((time.monotonic(), kind, len(obj.spec.devices or [])))


async def _until(events: Events, kind: str, devices: int | None = None) -> float:
    while True:
        at, got, count = await asyncio.wait_for(events.get(), 30)
        if got == kind and (devices is None or count == devices):
            return at


@contextlib.asynccontextmanager
async def _published(api: KubeApiServer, root: Path) -> AsyncIterator[tuple[AsyncClient, str]]:
    """An admin client and a Node whose slice the driver has published (2 devices)."""
    admin = AsyncClient(KubeConfig.from_file(api.kubeconfig), field_manager="bench")
    agent = AsyncClient(KubeConfig.from_file(api.kubeconfig))
    node = f"bench-{uuid.uuid4().hex[:6]}"
    await admin.create(Node(metadata=ObjectMeta(name=node)))
    host = fakehost.build(root / "host", "default")
    try:
        async with new_driver(root, host, client=agent, node=node) as driver:
            await driver.wait_published()
            yield admin, node
    finally:
        await admin.delete(Node, node)
        await agent.close()
        await admin.close()


async def _once(api: KubeApiServer, root: Path, kind: str) -> float:
    """One restore on a fresh driver: restores soon after another are paced on purpose."""
    async with _published(api, root) as (admin, node):
        events: Events = asyncio.Queue()
        watcher = asyncio.create_task(_watch(admin, node, events))
        try:
            await _until(events, "ADDED", 2)  # the published slice, from the watch's list
            if kind == "deleted":
                await delete_node_slices(admin, node)
                undone = await _until(events, "DELETED")
                return await _until(events, "ADDED", 2) - undone
            emptied: Any = {"spec": {"devices": []}}
            await admin.patch(
                ResourceSlice, slice_name(node, DRIVER_NAME), emptied, patch_type=PatchType.MERGE
            )
            undone = await _until(events, "MODIFIED", 0)
            return await _until(events, "MODIFIED", 2) - undone
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)


async def measure(api: KubeApiServer, rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"deleted": [], "changed": []}
    for _ in range(rounds):
        for kind, values in times.items():
            with tempfile.TemporaryDirectory(prefix="erdma-bench-", dir="/tmp") as tmp:
                values.append(await _once(api, Path(tmp), kind))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with KubeApiServer.start() as api:
        times = asyncio.run(measure(api, args.rounds))
    for what, values in times.items():
        ms = sorted(v * 1000 for v in values)
        print(
            f"{what} -> restored: median {statistics.median(ms):.1f} ms, "
            f"max {ms[-1]:.1f} ms over {len(ms)} rounds"
        )


if __name__ == "__main__":
    main()
