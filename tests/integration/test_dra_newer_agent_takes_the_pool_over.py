"""Two agents of different versions on one node (a rolling update) publish the same slice; the
newer one's write, with the higher pool generation, stands, and the older agent leaves it
instead of writing its own list back, so the two never undo each other's writes and the pool
generation never goes back. Real API server (kube-testserver)."""

from __future__ import annotations

import logging

from erdma.sim import fakehost
from tests.integration.dra_support import by_name, new_driver, slices_of
from tests.waiting import until

pytest_plugins = [
    "tests.integration.conftest_kubeapi",
    "tests.integration.conftest_dra_api",
]

LEFT = "ResourceSlice published with a newer pool generation by another instance"


async def test_the_newer_agents_slice_stands(short_root, admin, node, caplog):
    caplog.set_level(logging.INFO, logger="erdma.dra.slices")
    old_host = fakehost.build(short_root / "old" / "host", "default")
    new_host = fakehost.build(short_root / "new" / "host", "default")
    new_host.set_port_state("erdma_1", False)  # the new agent publishes another device list
    async with new_driver(short_root / "old", old_host, client=admin, node=node) as old:
        await old.wait_published()
        (first,) = await slices_of(admin, node)
        async with new_driver(short_root / "new", new_host, client=admin, node=node) as new:
            await new.wait_published()
            await until(lambda: LEFT in caplog.text, what="the old agent leaving the pool")
            (taken,) = await slices_of(admin, node)
            assert list(by_name(taken)) == ["erdma-0"]  # the newer agent's list stands
            assert taken["spec"]["pool"]["generation"] == first["spec"]["pool"]["generation"] + 1
    assert list(by_name(first)) == ["erdma-0", "erdma-1"]
