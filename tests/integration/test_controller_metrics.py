"""The controller's ``/metrics``: what an operator's Prometheus scrapes while Nodes come and go.

A real controller (kopf, the official SDK against the ECS emulator, the kube-testserver) serves
its metrics on the health port; each test scrapes that HTTP endpoint and checks the figures move
as the controller works: reconciles by result, ECS calls by action and code, throttles, ERIs by
state, queue depth and wait.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
from lightkube import AsyncClient
from prometheus_client.parser import text_string_to_metric_families

from erdma.controller.config import parse_config
from erdma.controller.main import run_controller
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GENERAL_ERI, GPU_TWO_CARDS, cloud_for
from tests.fakes.ports import free_port
from tests.integration.controller_rig import delete_node, kill
from tests.integration.controller_support import FAST, add_node, eventually, ready_device

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class Scraper:
    """GET /metrics like Prometheus and index the samples by name and labels."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"

    async def scrape(self) -> Samples:
        async with aiohttp.ClientSession() as session, session.get(self.url) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain")
            text = await resp.text()
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    async def value(self, name: str, **labels: str) -> float:
        """The sum over samples of ``name`` matching ``labels`` (0 when none)."""
        samples = await self.scrape()
        want = set(labels.items())
        return sum(v for (n, lbl), v in samples.items() if n == name and want <= lbl)

    async def reaches(self, name: str, at_least: float, **labels: str) -> float:
        async def check() -> float | None:
            value = await self.value(name, **labels)
            return value if value >= at_least else None

        return await eventually(check)


@contextlib.asynccontextmanager
async def scraped_controller(kube_api, emu: EcsEmulator) -> AsyncIterator[Scraper]:
    port = free_port()
    task = asyncio.create_task(
        run_controller(
            parse_config(FAST),
            cloud_for(emu),
            kubeconfig=kube_api.kubeconfig,
            leader_elect=False,
            health_port=port,
        )
    )
    scraper = Scraper(port)

    async def serving() -> bool:
        try:
            await scraper.scrape()
        except aiohttp.ClientConnectionError:
            return False
        return True

    try:
        await eventually(serving)
        yield scraper
    finally:
        await kill(task)


async def test_a_node_brought_up_shows_in_calls_reconciles_and_eri_states(
    kube_api, emu: EcsEmulator, k8s: AsyncClient
) -> None:
    async with scraped_controller(kube_api, emu) as metrics:
        assert await metrics.value("erdma_controller_eris", state="Ready") == 0
        create = {"action": "CreateNetworkInterface", "code": "Success"}
        assert await metrics.value("erdma_controller_ecs_calls_total", **create) == 0
        name = await add_node(k8s, emu.world.add_instance(GPU_TWO_CARDS.name))
        await eventually(lambda: ready_device(k8s, name))
        await metrics.reaches("erdma_controller_eris", 2, state="Ready")
        await metrics.reaches("erdma_controller_reconciles_total", 1, result="ready")
        assert await metrics.value("erdma_controller_ecs_calls_total", **create) == 1
        assert await metrics.value("erdma_controller_eris", state="Pending") == 0
        assert await metrics.value("erdma_controller_reconcile_duration_seconds_count") >= 2
        assert await metrics.value("erdma_controller_queue_wait_seconds_count") >= 2
        # a Ready Node waits in the queue for its periodic re-verification
        await metrics.reaches("erdma_controller_queue_depth", 1)

        await delete_node(k8s, name)

        async def eris_gone() -> bool:
            return await metrics.value("erdma_controller_eris") == 0

        await eventually(eris_gone)
        assert await metrics.value("erdma_controller_reconciles_total", result="removed") >= 1


async def test_refused_and_throttled_calls_are_counted_by_code(
    kube_api, emu: EcsEmulator, k8s: AsyncClient
) -> None:
    emu.denied_actions.add("DescribeInstanceTypes")
    emu.faults.throttle("DescribeInstances", times=2)
    async with scraped_controller(kube_api, emu) as metrics:
        await add_node(k8s, emu.world.add_instance(GENERAL_ERI.name))
        denied = {"action": "DescribeInstanceTypes", "code": "Forbidden.RAM"}
        await metrics.reaches("erdma_controller_ecs_calls_total", 2, **denied)
        await metrics.reaches("erdma_controller_reconciles_total", 2, result="failed")
        throttled = {"action": "DescribeInstances"}
        assert await metrics.value("erdma_controller_ecs_throttles_total", **throttled) == 2
        assert await metrics.value("erdma_controller_ecs_retries_total", **throttled) == 2
        assert await metrics.value("erdma_controller_reconciles_total", result="ready") == 0

        emu.denied_actions.clear()  # the RAM policy is fixed: the Node comes up
        await metrics.reaches("erdma_controller_eris", 1, state="Ready")
        await metrics.reaches("erdma_controller_reconciles_total", 1, result="ready")
