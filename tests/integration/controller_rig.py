"""The production controller run in-process against a kubeconfig and an ``EcsCloud``.

Used by the controller tests that kill the controller at a chosen ECS call and by the fault
suite (bench/chaos/ecs_faults.py): cancelling the task stops it where it is, with whatever
cloud call it had in flight never answered, as a SIGKILL would; the cloud-side state, which is
what these checks look at, is the same.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from erdma.controller.cloud import CloudApi
from erdma.controller.config import parse_config
from erdma.controller.main import run_controller
from erdma.kube.client import KubeApi
from tests.fakes.ecs import EcsEmulator
from tests.integration.controller_support import FAST, device, eventually


def start_controller(kubeconfig: str | Path, cloud: CloudApi, **config: Any) -> asyncio.Task[None]:
    """Start a controller (no leader election) with the fast test intervals plus ``config``."""
    return asyncio.create_task(
        run_controller(
            parse_config({**FAST, **config}), cloud, kubeconfig=kubeconfig, leader_elect=False
        )
    )


async def kill(task: asyncio.Task[None]) -> None:
    """Stop the controller wherever it is."""
    task.cancel()
    await asyncio.wait({task}, timeout=15)


@asynccontextmanager
async def running_controller(
    kubeconfig: str | Path, cloud: CloudApi, **config: Any
) -> AsyncIterator[asyncio.Task[None]]:
    task = start_controller(kubeconfig, cloud, **config)
    try:
        yield task
    finally:
        await kill(task)


async def wait_for_call(emu: EcsEmulator, action: str, count: int = 1, timeout: float = 20) -> None:
    """Until ECS has received ``count`` calls of ``action``."""

    async def arrived() -> bool:
        return emu.faults.calls[action] >= count

    await eventually(arrived, timeout)


async def delete_node(k8s: AsyncClient, name: str) -> None:
    """Delete the Node and wait until the API server no longer has it."""
    await k8s.delete(Node, name)

    async def gone() -> bool:
        return not [n async for n in k8s.list(Node) if n.metadata and n.metadata.name == name]

    await eventually(gone)


async def object_gone(k8s: AsyncClient, name: str, timeout: float = 20) -> None:
    async def gone() -> bool:
        return await device(k8s, name) is None

    await eventually(gone, timeout)


async def until(check: Any, timeout: float = 20.0, every: float = 0.1) -> float | None:
    """Seconds until the synchronous ``check()`` is true, or None when ``timeout`` passes first."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        await asyncio.sleep(every)
    return None


async def clear_cluster(k8s: AsyncClient) -> None:
    """Delete every Node and ERdmaDevice (finalizers dropped), for the next run to start empty."""
    async for node in k8s.list(Node):
        if node.metadata is not None and node.metadata.name is not None:
            await k8s.delete(Node, node.metadata.name)
    kube = KubeApi(k8s)
    for obj in await kube.list_devices():
        await kube.drop_finalizer(obj)
        await kube.delete_device(obj["metadata"]["name"])
