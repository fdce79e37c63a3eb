"""A reconcile the API server turns away (429, 5xx, 409) is retried, not counted as a crash.

The controller talks to the real kube-testserver through `ApiFaultProxy`, which answers the
first two creations of the Node's ERdmaDevice itself: 429 with ``Retry-After`` (the server
shedding load), 500, a load balancer's plain-text 503, or 409 AlreadyExists (a concurrent
writer). Each used to be logged as "reconcile of node X failed unexpectedly" with a traceback
and counted as ``crashed`` (the text 503 is not even a Status, so it was not an API error at
all to the client); the 429 was retried before the server's ``Retry-After``.
"""

from __future__ import annotations

import itertools
import logging

import pytest
from aiohttp import web

from erdma.controller import metrics
from erdma.kube import crd
from tests.fakes.ecs.client import GPU_TWO_CARDS, cloud_for
from tests.fakes.kubeapi import KubeApiServer
from tests.integration.api_fault_proxy import ApiFaultProxy, Rule, status_answer, text_answer
from tests.integration.controller_rig import running_controller
from tests.integration.controller_support import add_node, eventually, ready_device

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]

DEVICES = f"/apis/{crd.GROUP}/{crd.VERSION}/{crd.PLURAL}"
RESULTS = "erdma_controller_reconciles_total"
RETRY_AFTER = 3


def creating_a_device(request: web.Request) -> bool:
    return request.method == "POST" and request.path == DEVICES


CASES = {
    "429 with Retry-After": (
        status_answer(429, "TooManyRequests", {"Retry-After": str(RETRY_AFTER)}),
        metrics.RESULT_API_THROTTLED,
    ),
    "500": (status_answer(500, "InternalError"), metrics.RESULT_API_UNAVAILABLE),
    "503 page from a load balancer": (
        text_answer(503, "<html><body>503 Service Unavailable</body></html>\n" * 40),
        metrics.RESULT_API_UNAVAILABLE,
    ),
    "409 from a concurrent writer": (
        status_answer(409, "AlreadyExists"),
        metrics.RESULT_CONFLICT,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_pass_the_api_server_turns_away_is_retried_without_a_crash(
    kube_api: KubeApiServer, k8s, emu, caplog, case: str
):
    caplog.set_level(logging.INFO, logger="erdma")
    answer, result = CASES[case]
    cloud = cloud_for(emu)
    async with (
        ApiFaultProxy(kube_api) as proxy,
        running_controller(proxy.kubeconfig(), cloud, errorRequeueSeconds=30.0),
    ):
        proxy.add(Rule(creating_a_device, answer, times=2))
        name = await add_node(k8s, emu.world.add_instance(GPU_TWO_CARDS.name))
        await eventually(lambda: ready_device(k8s, name), timeout=60)
    assert cloud.metrics.value(RESULTS, result=result) >= 2
    assert cloud.metrics.value(RESULTS, result=metrics.RESULT_CRASHED) == 0
    assert not [r for r in caplog.records if r.exc_info], "a turned-away pass logged a traceback"
    assert not [r for r in caplog.records if "unexpectedly" in r.getMessage()]
    creations = [s.at for s in proxy.seen if s.method == "POST" and s.path == DEVICES]
    assert len(creations) == 3
    if result == metrics.RESULT_API_THROTTLED:
        assert all(b - a >= RETRY_AFTER for a, b in itertools.pairwise(creations))
