"""Watch errors from the API server never end the controller; it re-lists with backoff.

The controller talks to the real kube-testserver through `ApiFaultProxy`, which answers the
Node watch itself: with an HTTP error (410 Gone, as a proxy or aggregator does for a too-old
resourceVersion; 403 while RBAC changes; 404 while a CRD is re-created; 503), or with a stream
that carries ``ERROR 410 Expired`` at once. Each used to end the process (the HTTP errors) or
to re-list about nine times a second (the expiry).
"""

from __future__ import annotations

import logging

import aiohttp
import pytest

from erdma.controller.watch_guard import WatchHealth
from tests.fakes.ecs.client import GPU_TWO_CARDS, cloud_for
from tests.fakes.kubeapi import KubeApiServer
from tests.fakes.ports import free_port
from tests.integration.api_fault_proxy import (
    ApiFaultProxy,
    Rule,
    expired_watch,
    status_answer,
    watch_of,
)
from tests.integration.controller_rig import running_controller
from tests.integration.controller_support import add_node, eventually, ready_device

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]

NODES = "/api/v1/nodes"
WARNING = "keeps failing"


async def readyz(port: int) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/readyz") as resp,
    ):
        return resp.status, await resp.text()


@pytest.mark.parametrize(
    ("code", "reason"),
    [(410, "Gone"), (403, "Forbidden"), (404, "NotFound"), (503, "ServiceUnavailable")],
)
async def test_a_watch_answered_with_an_error_does_not_end_the_controller(
    kube_api: KubeApiServer, k8s, emu, caplog, code: int, reason: str
):
    caplog.set_level(logging.INFO, logger="erdma")
    port = free_port()
    async with (
        ApiFaultProxy(kube_api) as proxy,
        running_controller(proxy.kubeconfig(), cloud_for(emu), healthPort=port) as task,
    ):
        first = await add_node(k8s, emu.world.add_instance(GPU_TWO_CARDS.name))
        await eventually(lambda: ready_device(k8s, first))
        proxy.add(Rule(watch_of(NODES), status_answer(code, reason)))
        await proxy.end_watches()

        async def not_ready() -> str | None:
            status, body = await readyz(port)
            return body if status == 503 and "watch of nodes" in body else None

        why = await eventually(not_ready, timeout=60)
        assert f"HTTP {code}" in why
        assert not task.done(), "the controller ended on a watch error"
        proxy.clear()

        async def ready() -> bool:
            return (await readyz(port))[0] == 200

        await eventually(ready, timeout=60)
        later = await add_node(k8s, emu.world.add_instance(GPU_TWO_CARDS.name))
        await eventually(lambda: ready_device(k8s, later))
        assert not task.done()
    warnings = [r for r in caplog.records if WARNING in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert not [r for r in caplog.records if r.exc_info], "a watch error logged a traceback"
    assert any("works again" in r.getMessage() for r in caplog.records)


async def test_a_watch_that_keeps_expiring_is_re_listed_with_growing_pauses(
    kube_api: KubeApiServer, k8s, emu
):
    async with (
        ApiFaultProxy(kube_api) as proxy,
        running_controller(proxy.kubeconfig(), cloud_for(emu)) as task,
    ):
        first = await add_node(k8s, emu.world.add_instance(GPU_TWO_CARDS.name))
        await eventually(lambda: ready_device(k8s, first))
        proxy.add(Rule(watch_of(NODES), expired_watch))
        await proxy.end_watches()

        async def expired_five_times() -> bool:
            return len(proxy.requests(NODES, watch=True)) >= 7

        await eventually(expired_five_times, timeout=60)
        assert not task.done()
    watches = [s.at for s in proxy.requests(NODES, watch=True) if s.status == 200]
    gaps = [b - a for a, b in zip(watches[-5:], watches[-4:], strict=False)]
    promised = WatchHealth().backoff
    # each failed cycle waits at least the lower bound of its backoff step, which only grows
    # under load; kopf alone re-lists after a fixed 0.1 s
    assert all(gap >= promised.initial / 2 for gap in gaps), gaps
    assert gaps[-1] >= 2 * promised.initial, gaps
