"""The controller's initial list of Nodes comes in pages (kopf's chunked list with continue
tokens, against the real test API server): a Node on a later page is not skipped."""

from __future__ import annotations

import asyncio
from functools import partial

from erdma.controller import handlers
from tests.fakes.ecs.client import GENERAL_ERI, cloud_for
from tests.integration.controller_rig import running_controller
from tests.integration.controller_support import add_node, eventually, ready_device

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]


async def test_every_node_listed_before_start_is_reconciled_with_one_node_per_page(
    kube_api, emu, k8s, monkeypatch
):
    monkeypatch.setattr(handlers, "LIST_PAGE_SIZE", 1)
    assert handlers.operator_settings().watching.chunk_size == 1
    names = [await add_node(k8s, emu.world.add_instance(GENERAL_ERI.name)) for _ in range(3)]
    async with running_controller(kube_api.kubeconfig, cloud_for(emu)):
        ready = await asyncio.gather(*(eventually(partial(ready_device, k8s, n)) for n in names))
    assert [obj["metadata"]["name"] for obj in ready] == names
