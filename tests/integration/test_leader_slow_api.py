"""A slow API server is not an outage for the leader: one write per renew, each request bounded.

The elector reaches the real kube-testserver through `ApiFaultProxy`, which makes every request
slow or leaves one unanswered. A renew used to be a read and a write, so a 15 s lease (10 s
renew deadline) lost leadership at about 2 s per request, and a renew left hanging used all
the time to the deadline: the leader lost its lease without a second try.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from lightkube import AsyncClient, KubeConfig

from erdma.kube.leader import LeaderElector
from tests.fakes.kubeapi import KubeApiServer
from tests.integration.api_fault_proxy import ApiFaultProxy, Rule
from tests.integration.controller_support import eventually

pytest_plugins = ["tests.integration.conftest_kubeapi"]

NAMESPACE = "kube-system"
DURATION = 5.0  # renewDeadline 3.33 s, retryPeriod 0.67 s: a 15 s lease scaled down three times
RENEWS = 4


@pytest.fixture
async def proxy(kube_api: KubeApiServer) -> AsyncIterator[ApiFaultProxy]:
    async with ApiFaultProxy(kube_api) as proxy:
        yield proxy


async def leading_through(proxy: ApiFaultProxy, caplog) -> tuple[LeaderElector, int]:
    """Run an elector through the proxy until it has renewed ``RENEWS`` times; the elector and
    how many times it had read its Lease by then (its release at the end reads once more)."""
    caplog.set_level(logging.INFO, logger="erdma")
    name = f"slow-{uuid.uuid4().hex[:6]}"
    path = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{name}"
    client = AsyncClient(KubeConfig.from_file(proxy.kubeconfig()))
    elector = LeaderElector(client, NAMESPACE, name, "a", DURATION)
    stop = asyncio.Event()

    async def work() -> None:
        await stop.wait()

    run = asyncio.create_task(elector.run(work))
    try:

        async def renewed() -> bool:
            puts = [s for s in proxy.seen if s.method == "PUT" and s.path == path]
            return len([s for s in puts if s.status == 200]) >= RENEWS

        await eventually(renewed, timeout=60)
        assert elector.is_leader and not run.done()
        reads = len([s for s in proxy.seen if s.method == "GET" and s.path == path])
    finally:
        stop.set()
        await asyncio.wait({run}, timeout=30)
        await client.close()
    return elector, reads


async def test_a_leader_renews_with_one_write_on_a_slow_api_server(proxy: ApiFaultProxy, caplog):
    proxy.delay = DURATION / 15  # 1 s per request of a 15 s lease
    _, reads = await leading_through(proxy, caplog)
    assert reads == 1, "a holder read the Lease again before renewing it"
    assert not [r for r in caplog.records if "lost leadership" in r.getMessage()]


async def test_a_renew_left_unanswered_is_retried_before_the_deadline(proxy: ApiFaultProxy, caplog):
    async def never(_: web.Request) -> web.StreamResponse:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    holder_writes = 0

    def second_renew(request: web.Request) -> bool:
        nonlocal holder_writes
        if request.method == "PUT" and "/leases/slow-" in request.path:
            holder_writes += 1
            return holder_writes == 2
        return False

    proxy.add(Rule(second_renew, never))
    elector, _ = await leading_through(proxy, caplog)
    assert holder_writes > RENEWS, "the unanswered renew was never followed by another"
    assert not [r for r in caplog.records if "lost leadership" in r.getMessage()]
    assert elector.request_timeout < elector.renew_deadline / 2
