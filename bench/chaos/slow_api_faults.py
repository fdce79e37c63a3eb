"""A slow API server, a failing watch and refused writes under the real `erdma controller`.

The controller runs as its own process with leader election on the chart's default 15 s lease
and reaches the real kube-testserver only through `ApiFaultProxy`, which delays every request
(2 s or 3 s), answers the Node watch itself, or turns ERdmaDevice writes away (429 with
Retry-After, 500, a load balancer's 503 page, 409). Held means: the process never exited, it
never lost its lease, and every Node became Ready (and, for refused writes, no reconcile
counted as crashed). A slow server used to be an outage: at 2 s per request the leader lost its
lease about every 10 s and no Node of 200 became Ready in 10 minutes; a watch answered 410 Gone
ended the process; a 503 page counted as a crash, logged with a traceback.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from aiohttp import web
from lightkube import AsyncClient

from bench.chaos.apiserver_faults import ControllerProcess, backdrop
from bench.chaos.framework import Trials, scenario, stopwatch
from erdma.kube import crd
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GENERAL_ERI
from tests.integration.api_fault_proxy import (
    ApiFaultProxy,
    Rule,
    status_answer,
    text_answer,
    watch_of,
)
from tests.integration.controller_support import add_node, eventually, ready_device

LEASE_SECONDS = 15.0  # the chart's default: renewDeadline 10 s, retryPeriod 2 s
LOST = "lost leadership"


@dataclass
class SlowCluster:
    client: AsyncClient
    emu: EcsEmulator
    proxy: ApiFaultProxy
    controller: ControllerProcess


@asynccontextmanager
async def slow_cluster() -> AsyncIterator[SlowCluster]:
    """API server, ECS emulator, fault proxy and a leading controller behind it."""
    async with AsyncExitStack() as stack:
        base = await backdrop(stack)
        proxy = await stack.enter_async_context(ApiFaultProxy(base.api))
        controller = ControllerProcess(
            base.work, proxy.kubeconfig(), base.emu.endpoint, lease_seconds=LEASE_SECONDS
        )
        await controller.start()
        stack.push_async_callback(controller.stop)
        await eventually(controller.leading, timeout=60)
        yield SlowCluster(base.client, base.emu, proxy, controller)


def _problems(env: SlowCluster) -> list[str]:
    problems = []
    if env.controller.exited:
        problems.append(f"the controller exited: {env.controller.log_tail()}")
    log = (env.controller.work / "controller.log").read_text(errors="replace")
    if LOST in log:
        problems.append(f"the leader lost its lease {log.count(LOST)} times")
    return problems


async def nodes_ready_on_a_slow_server(trials: Trials, seconds_per_request: float) -> None:
    count = 20 if trials.short else 200
    async with slow_cluster() as env:
        for _ in range(trials.count):
            env.proxy.delay = seconds_per_request
            with stopwatch() as elapsed:
                names = [
                    await add_node(env.client, env.emu.world.add_instance(GENERAL_ERI.name))
                    for _ in range(count)
                ]
                ready = await asyncio.gather(
                    *(_ready_within(env.client, name, 600) for name in names)
                )
                took = elapsed()
            env.proxy.delay = 0.0
            problems = _problems(env)
            if not all(ready):
                problems.append(f"{ready.count(False)} of {count} Nodes not Ready in 600 s")
            trials.check(not problems, "; ".join(problems), took)


async def _ready_within(client: AsyncClient, name: str, timeout: float) -> bool:
    try:
        await eventually(lambda: ready_device(client, name), timeout=timeout)
    except AssertionError:
        return False
    return True


KEEPS_LEADING = "no exit; the leader keeps its lease; every Node Ready"


def _slow(seconds_per_request: float) -> Callable[[Trials], Awaitable[None]]:
    async def body(trials: Trials) -> None:
        await nodes_ready_on_a_slow_server(trials, seconds_per_request)

    return body


for _seconds in (2, 3):
    scenario(
        f"API server at {_seconds} s per request, 200 Nodes (20 short)",
        area="controller",
        full=1,
        short=1,
        holds=KEEPS_LEADING,
    )(_slow(float(_seconds)))


WATCH_ERRORS = ((410, "Gone"), (403, "Forbidden"), (404, "NotFound"), (503, "ServiceUnavailable"))


@scenario(
    "Node watch answered 410/403/404/503 for 10 s each (2 s short)",
    area="controller",
    full=3,
    short=1,
    holds="no exit; the leader keeps its lease; a Node added meanwhile gets Ready",
)
async def watch_errors(trials: Trials) -> None:
    async with slow_cluster() as env:
        for _ in range(trials.count):
            problems: list[str] = []
            with stopwatch() as elapsed:
                for code, reason in WATCH_ERRORS:
                    env.proxy.add(Rule(watch_of("/api/v1/nodes"), status_answer(code, reason)))
                    await env.proxy.end_watches()
                    name = await add_node(env.client, env.emu.world.add_instance(GENERAL_ERI.name))
                    await asyncio.sleep(2.0 if trials.short else 10.0)
                    env.proxy.clear()
                    if not await _ready_within(env.client, name, 120):
                        problems.append(f"a Node added during {code} was not Ready in 120 s")
                took = elapsed()
            problems += _problems(env)
            trials.check(not problems, "; ".join(problems), took)


REFUSALS = (
    status_answer(429, "TooManyRequests", {"Retry-After": "1"}),
    status_answer(500, "InternalError"),
    text_answer(503, "<html><body>503 Service Unavailable</body></html>"),
    status_answer(409, "AlreadyExists"),
)
DEVICES = f"/apis/{crd.GROUP}/{crd.VERSION}/{crd.PLURAL}"
RECONCILES = "erdma_controller_reconciles_total"


def _device_write(request: web.Request) -> bool:
    return request.method in ("POST", "PATCH") and request.path.startswith(DEVICES)


@scenario(
    "ERdmaDevice writes answered 429/500/503 page/409, 3 of each",
    area="controller",
    full=3,
    short=1,
    holds="no exit; no reconcile counted as crashed; every Node Ready",
)
async def refused_writes(trials: Trials) -> None:
    async with slow_cluster() as env:
        for _ in range(trials.count):
            with stopwatch() as elapsed:
                rules = [env.proxy.add(Rule(_device_write, a, times=3)) for a in REFUSALS]
                names = [
                    await add_node(env.client, env.emu.world.add_instance(GENERAL_ERI.name))
                    for _ in range(4)
                ]
                ready = [await _ready_within(env.client, name, 120) for name in names]
                took = elapsed()
            env.proxy.clear()
            problems = _problems(env)
            if (refused := sum(r.hits for r in rules)) < 3 * len(rules):
                problems.append(f"only {refused} of {3 * len(rules)} writes were turned away")
            if not all(ready):
                problems.append(f"{ready.count(False)} of {len(names)} Nodes not Ready in 120 s")
            if crashed := await env.controller.metric(RECONCILES, result="crashed"):
                problems.append(f"{crashed:.0f} reconciles counted as crashed")
            trials.check(not problems, "; ".join(problems), took)
