"""The driver puts its ResourceSlice back whenever someone else removes or changes it.

The kubelet deletes every slice of its node when it starts, and a driver's slices 30 s after
the driver's registration goes away; an administrator may delete or edit one. Each case runs
against the real API server (kube-testserver): the kubelet stand-in deletes the slice as the
kubelet does on start, the admin client edits it, and the driver's connection is cut or its
watch answered ``410 Expired`` through proxies. The slice must come back with the devices the
driver last published; deadlines only bound a hang (the time it takes is in bench/RESULTS.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from lightkube import AsyncClient, KubeConfig
from lightkube.resources.resource_v1 import ResourceSlice
from lightkube.types import PatchType

from erdma.dra.names import DRIVER_NAME
from erdma.dra.slice_watch import relist_backoff
from erdma.dra.slices import restore_backoff
from erdma.sim import fakehost
from erdma.sim.dra_kubelet import FakeDraKubelet
from tests.fakes.kubeapi import KubeApiServer
from tests.integration.api_fault_proxy import ApiFaultProxy, Rule, expired_watch, watch_of
from tests.integration.controller_support import eventually
from tests.integration.dra_support import by_name, new_driver, slices_of
from tests.integration.proxy_support import CuttableProxy, proxied_kubeconfig

pytest_plugins = [
    "tests.integration.conftest_kubeapi",
    "tests.integration.conftest_dra_api",
]

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
DEADLINE = 60.0


def restored(admin: AsyncClient, node: str, before: dict[str, Any]):
    """A check: this node's one slice, once it is a new object with ``before``'s devices."""

    async def check() -> dict[str, Any] | None:
        found = await slices_of(admin, node)
        if len(found) != 1:
            return None
        (now,) = found
        new = now["metadata"]["uid"] != before["metadata"]["uid"]
        return now if new and by_name(now) == by_name(before) else None

    return check


@contextlib.asynccontextmanager
async def published_behind(proxy: ApiFaultProxy, root: Path, node: str) -> AsyncIterator[None]:
    """A driver on a default host whose API requests go through ``proxy``, its slice
    published and its watch of slices open (so that `end_watches` reaches it)."""
    host = fakehost.build(root / "host", "default")
    client = AsyncClient(KubeConfig.from_file(proxy.kubeconfig()))

    async def watching() -> bool:
        return proxy.watching(SLICES)

    try:
        async with new_driver(root, host, client=client, node=node) as driver:
            await driver.wait_published()
            await eventually(watching, DEADLINE)
            yield
    finally:
        await client.close()


async def test_the_slice_a_starting_kubelet_deletes_comes_back(short_root, admin, node):
    host = fakehost.build(short_root / "host", "default")
    async with new_driver(short_root, host, client=admin, node=node) as driver:
        await driver.wait_published()
        (before,) = await slices_of(admin, node)
        async with FakeDraKubelet(short_root / "kubelet", client=admin, node_name=node) as kubelet:
            assert kubelet.wiped == [[before["metadata"]["name"]]]
            after = await eventually(restored(admin, node, before), DEADLINE)
            await kubelet.restart()  # and again on every kubelet restart
            assert kubelet.wiped[-1] == [before["metadata"]["name"]]
            await eventually(restored(admin, node, after), DEADLINE)
    assert sorted(by_name(after)) == ["erdma-0", "erdma-1"]
    assert after["metadata"]["name"] == before["metadata"]["name"]
    assert after["metadata"]["ownerReferences"] == before["metadata"]["ownerReferences"]


async def test_devices_another_writer_removes_are_put_back(short_root, admin, node):
    host = fakehost.build(short_root / "host", "default")
    async with new_driver(short_root, host, client=admin, node=node) as driver:
        await driver.wait_published()
        (before,) = await slices_of(admin, node)
        name = before["metadata"]["name"]
        await admin.patch(
            ResourceSlice, name, {"spec": {"devices": []}}, patch_type=PatchType.MERGE
        )

        async def devices_back() -> dict[str, Any] | None:
            (now,) = await slices_of(admin, node)
            return now if by_name(now) == by_name(before) else None

        after = await eventually(devices_back, DEADLINE)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]  # the same object, repaired
    assert after["spec"]["pool"] == before["spec"]["pool"]


async def test_a_second_slice_of_this_node_and_driver_is_removed(short_root, admin, node):
    host = fakehost.build(short_root / "host", "default")
    async with new_driver(short_root, host, client=admin, node=node) as driver:
        await driver.wait_published()
        (ours,) = await slices_of(admin, node)
        stray = ResourceSlice.from_dict(
            {
                "metadata": {"name": f"{node}-stray"},
                "spec": {
                    "driver": DRIVER_NAME,
                    "nodeName": node,
                    "devices": [],
                    "pool": {"name": node, "generation": 99, "resourceSliceCount": 1},
                },
            }
        )
        await admin.create(stray)

        async def only_ours() -> bool:
            names = [s["metadata"]["name"] for s in await slices_of(admin, node)]
            return names == [ours["metadata"]["name"]]

        await eventually(only_ours, DEADLINE)


async def test_a_slice_deleted_while_the_api_server_is_away_comes_back_when_it_returns(
    short_root, admin, node, kube_api: KubeApiServer
):
    proxy = CuttableProxy(kube_api.port)
    await proxy.start()
    cut_off = AsyncClient(KubeConfig.from_dict(proxied_kubeconfig(kube_api, proxy)))
    host = fakehost.build(short_root / "host", "default")
    try:
        async with new_driver(short_root, host, client=cut_off, node=node) as driver:
            await driver.wait_published()
            (before,) = await slices_of(admin, node)
            await proxy.cut()
            await admin.delete(ResourceSlice, before["metadata"]["name"])
            await proxy.start()
            await eventually(restored(admin, node, before), DEADLINE)
    finally:
        await cut_off.close()
        await proxy.close()


async def test_the_watch_lists_again_after_its_resource_version_expires(
    short_root, admin, node, kube_api: KubeApiServer
):
    async with ApiFaultProxy(kube_api) as proxy, published_behind(proxy, short_root, node):
        (before,) = await slices_of(admin, node)
        expiry = proxy.add(Rule(watch_of(SLICES), expired_watch, times=1))
        await proxy.end_watches()

        async def listed_after_expiry() -> bool:
            # a watch is recorded when it ends: the last one is the expired one
            watches = [s.at for s in proxy.requests(SLICES, watch=True)]
            lists = [s.at for s in proxy.requests(SLICES, watch=False)]
            return expiry.hits == 1 and lists[-1] > watches[-1]

        await eventually(listed_after_expiry, DEADLINE)
        await admin.delete(ResourceSlice, before["metadata"]["name"])
        await eventually(restored(admin, node, before), DEADLINE)


async def test_a_watch_that_keeps_expiring_is_listed_again_with_growing_pauses(
    short_root, admin, node, kube_api: KubeApiServer
):
    async with ApiFaultProxy(kube_api) as proxy, published_behind(proxy, short_root, node):
        expiry = proxy.add(Rule(watch_of(SLICES), expired_watch))
        await proxy.end_watches()

        async def expired_five_times() -> bool:
            return expiry.hits >= 5

        await eventually(expired_five_times, DEADLINE)
    watches = [s.at for s in proxy.requests(SLICES, watch=True)][-5:]  # the expired ones
    gaps = [b - a for a, b in itertools.pairwise(watches)]
    promised = relist_backoff()
    # each expired watch is followed by a pause of at least half its backoff step, which
    # only grows under load: never a re-list loop
    assert all(gap >= promised.initial / 2 for gap in gaps), gaps
    assert gaps[-1] >= 2 * promised.initial, gaps


async def test_a_client_that_keeps_emptying_the_slice_meets_growing_pauses(short_root, admin, node):
    """Another writer undoes every restore at once (as a second driver publishing other devices
    under the same name would): the driver restores each time, after pauses that grow."""
    host = fakehost.build(short_root / "host", "default")
    restores: list[float] = []
    async with new_driver(short_root, host, client=admin, node=node) as driver:
        await driver.wait_published()
        (before,) = await slices_of(admin, node)
        name, loop = before["metadata"]["name"], asyncio.get_running_loop()
        fields = {"spec.nodeName": node, "spec.driver": DRIVER_NAME}
        empty: dict[str, Any] = {"spec": {"devices": []}}
        await admin.patch(ResourceSlice, name, empty, patch_type=PatchType.MERGE)
        async for _, obj in admin.watch(ResourceSlice, fields=fields):
            if obj.spec.devices:  # the driver's restore: undo it
                restores.append(loop.time())
                if len(restores) == 5:
                    break
                await admin.patch(ResourceSlice, name, empty, patch_type=PatchType.MERGE)
        (last,) = await slices_of(admin, node)
    assert by_name(last) == by_name(before)  # the driver had the last word
    gaps = [b - a for a, b in itertools.pairwise(restores)]
    promised = restore_backoff()
    assert all(gap >= promised.initial / 2 for gap in gaps), gaps
    assert gaps[-1] >= 2 * promised.initial, gaps
