"""ResourceSlice publishing against a real API server (kube-testserver, resource.k8s.io/v1).

Proves what the scheduler and the cluster rely on: one slice per node by server-side apply
(our field manager), owned by the Node, pool = node name with a generation that grows on every
change, attributes a DeviceClass can select on, the standard pcieRoot equal to a GPU's on the
same root, unhealthy devices withdrawn or tainted and back when healed, other nodes' and other
drivers' slices never touched, a restarted agent taking the slice over without a new
generation, and this node's slices deleted when the driver stops, if asked to.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

from lightkube import AsyncClient, KubeConfig
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from erdma.dra import DraConfig, pcie_root
from erdma.dra.names import DRIVER_NAME, PCIE_ROOT_ATTRIBUTE
from erdma.dra.slices import FIELD_MANAGER
from erdma.host.devices import scan
from erdma.sim import fakehost
from tests.integration.dra_support import by_name, new_driver, slices_of
from tests.integration.proxy_support import CuttableProxy, proxied_kubeconfig

pytest_plugins = [
    "tests.integration.conftest_kubeapi",
    "tests.integration.conftest_dra_api",
]


def gpu_host(root: Path) -> fakehost.FakeHost:
    """eRDMA on roots pci0000:00 and pci0000:80, one GPU behind each of the same roots."""
    spec = replace(fakehost.erdma_node(), gpus=(("0000:00:08.0", 0), ("0000:80:08.0", 1)))
    return fakehost.build(root / "host", spec)


async def test_one_slice_per_node_applied_and_owned_by_the_node(short_root, admin, node):
    host = gpu_host(short_root)
    async with new_driver(short_root, host, client=admin, node=node) as driver:
        await driver.wait_published()
        (got,) = await slices_of(admin, node)
        node_uid = (await admin.get(Node, node)).metadata.uid
    meta, spec = got["metadata"], got["spec"]
    assert meta["name"] == f"{node}-{DRIVER_NAME}"
    assert meta["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": node,
        "uid": node_uid,
        "controller": True,
    }
    assert any(
        m["manager"] == FIELD_MANAGER and m["operation"] == "Apply" for m in meta["managedFields"]
    )
    assert spec["pool"] == {"name": node, "generation": 1, "resourceSliceCount": 1}
    assert spec["driver"] == DRIVER_NAME and spec["nodeName"] == node
    erdma0 = by_name(got)["erdma-0"]["attributes"]
    assert erdma0["kind"] == {"string": "erdma"} and erdma0["ibdev"] == {"string": "erdma_0"}
    assert erdma0["netdev"] == {"string": "eth1"} and erdma0["numaNode"] == {"int": 0}
    assert erdma0["mac"] == {"string": "00:16:3e:2f:37:75"}
    assert erdma0["driverMode"] == {"string": "default"}
    assert erdma0["linkState"] == {"string": "ACTIVE"} and "pnetid" in erdma0


async def test_pcie_root_matches_the_gpu_on_the_same_root(short_root, admin, node):
    host = gpu_host(short_root)
    async with new_driver(short_root, host, client=admin, node=node) as driver:
        await driver.wait_published()
        (got,) = await slices_of(admin, node)
    devices = by_name(got)
    roots = {n: d["attributes"][PCIE_ROOT_ATTRIBUTE]["string"] for n, d in devices.items()}
    gpu0, gpu1 = (pcie_root(host.root, gpu.pci_address) for gpu in scan(host.root).gpus)
    assert roots == {"erdma-0": gpu0, "erdma-1": gpu1}
    assert (gpu0, gpu1) == ("pci0000:00", "pci0000:80")


async def test_unhealthy_device_is_withdrawn_and_comes_back(short_root, admin, node):
    host = gpu_host(short_root)
    async with new_driver(short_root, host, client=admin, node=node) as driver:
        await driver.wait_published()
        host.set_port_state("erdma_1", False)
        assert driver.publish(scan(host.root))
        await driver.wait_published(2.0)  # well within one rescan round of the agent
        (down,) = await slices_of(admin, node)
        assert not driver.publish(scan(host.root))  # nothing changed: no new generation
        host.set_port_state("erdma_1", True)
        driver.publish(scan(host.root))
        await driver.wait_published(2.0)
        (healed,) = await slices_of(admin, node)
    assert sorted(by_name(down)) == ["erdma-0"] and down["spec"]["pool"]["generation"] == 2
    assert sorted(by_name(healed)) == ["erdma-0", "erdma-1"]
    assert healed["spec"]["pool"]["generation"] == 3


async def test_taint_mode_keeps_the_device_with_a_noschedule_taint(short_root, admin, node):
    host = gpu_host(short_root)
    host.set_port_state("erdma_0", False)
    config = DraConfig(enabled=True, unhealthy="taint")
    async with new_driver(short_root, host, client=admin, node=node, config=config) as driver:
        await driver.wait_published()
        (got,) = await slices_of(admin, node)
    devices = by_name(got)
    (taint,) = devices["erdma-0"]["taints"]
    assert (taint["key"], taint["value"], taint["effect"]) == (
        f"{DRIVER_NAME}/unhealthy",
        "LinkDown",
        "NoSchedule",
    )
    assert "taints" not in devices["erdma-1"]


async def test_consumable_capacity_publishes_shareable_slots(short_root, admin, node):
    host = gpu_host(short_root)
    config = DraConfig(enabled=True, consumable_capacity=True, slots_per_device=200)
    async with new_driver(short_root, host, client=admin, node=node, config=config) as driver:
        await driver.wait_published()
        (got,) = await slices_of(admin, node)
    device = by_name(got)["erdma-0"]
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"]["slots"]["value"] == "200"
    assert device["capacity"]["slots"]["requestPolicy"]["validRange"] == {"min": "1", "max": "200"}


async def test_restart_takes_the_slice_over_and_a_stop_deletes_only_this_nodes_if_asked(
    short_root, admin, node
):
    """An agent stop keeps the slice; the next agent, publishing the same devices, takes it
    over as it is (no write, no new generation); one publishing other devices continues the
    generation; `deleteSlicesOnStop` deletes this node's slices of this driver and no other."""
    host = gpu_host(short_root)
    other_node = {"name": "someone-else", "generation": 7, "resourceSliceCount": 1}
    foreign: list[Any] = [
        ResourceSlice.from_dict(
            {
                "metadata": {"name": f"{node}-other"},
                "spec": {
                    "driver": "gpu.example.com",
                    "nodeName": node,
                    "devices": [],
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                },
            }
        ),
        ResourceSlice.from_dict(
            {
                "metadata": {"name": f"x-{node}"},
                "spec": {
                    "driver": DRIVER_NAME,
                    "nodeName": "someone-else",
                    "devices": [],
                    "pool": other_node,
                },
            }
        ),
    ]
    for obj in foreign:
        await admin.create(obj)
    try:
        async with new_driver(short_root, host, client=admin, node=node) as first:
            await first.wait_published()
        (kept,) = await slices_of(admin, node)
        async with new_driver(short_root, host, client=admin, node=node) as second:
            await second.wait_published()
            (taken,) = await slices_of(admin, node)
        assert kept["spec"]["pool"]["generation"] == 1
        assert taken["metadata"] == kept["metadata"]  # same object, not even rewritten
        host.set_port_state("erdma_1", False)
        remove = DraConfig(enabled=True, delete_slices_on_stop=True)
        async with new_driver(short_root, host, client=admin, node=node, config=remove) as third:
            await third.wait_published()
            (changed,) = await slices_of(admin, node)
        assert changed["spec"]["pool"]["generation"] == 2
        assert list(by_name(changed)) == ["erdma-0"]
        assert await slices_of(admin, node) == []
        assert len(await slices_of(admin, node, "gpu.example.com")) == 1
        (untouched,) = await slices_of(admin, "someone-else")
        assert untouched["spec"]["pool"] == other_node
    finally:
        for obj in foreign:
            await admin.delete(ResourceSlice, obj.metadata.name)


async def test_a_change_made_while_the_api_server_is_away_is_published_when_it_returns(
    short_root, admin, node, kube_api
):
    """A connection refused is retried with backoff; the wanted device list is kept, not lost."""
    proxy = CuttableProxy(kube_api.port)
    await proxy.start()
    cut_off = AsyncClient(KubeConfig.from_dict(proxied_kubeconfig(kube_api, proxy)))
    host = fakehost.build(short_root / "host", "default")
    driver = new_driver(short_root, host, client=cut_off, node=node)
    try:
        async with driver:
            await driver.wait_published()
            assert len(by_name((await slices_of(admin, node))[0])) == 2
            await proxy.cut()
            host.set_port_state("erdma_1", False)
            driver.publish(scan(host.root))  # withdraws erdma_1 while the server is away
            await asyncio.sleep(1.0)  # several refused attempts
            assert len(by_name((await slices_of(admin, node))[0])) == 2
            await proxy.start()
            await driver.wait_published(timeout=35)
            assert len(by_name((await slices_of(admin, node))[0])) == 1
    finally:
        await cut_off.close()
        await proxy.close()
