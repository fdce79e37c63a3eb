"""Helpers shared by the ``erdma controller`` end-to-end tests.

Nodes are created the way a kubelet would (providerID, then Ready and InternalIP through the
status subresource), and ``eventually`` polls for what the controller makes of them. The
``emu`` and ``k8s`` fixtures these tests use come from ``tests.integration.conftest_controller``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import NodeSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from erdma.kube import crd
from erdma.kube.client import ERdmaDeviceResource
from tests.fakes.ecs.state import InstanceRecord

T = TypeVar("T")

FAST = {
    "region": "cn-hangzhou",
    "pendingRequeueSeconds": 0.3,
    "nodeNotReadyRequeueSeconds": 0.3,
    "reverifyIntervalSeconds": 0.5,
    "errorRequeueSeconds": 0.5,
    "healthPort": 0,
}


async def eventually(check: Callable[[], Awaitable[T | None]], timeout: float = 20.0) -> T:
    """Poll ``check`` until it returns something truthy; fail with its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s; last value: {value!r}")
        await asyncio.sleep(0.2)


async def add_node(
    client: AsyncClient,
    inst: InstanceRecord,
    *,
    ready: bool = True,
    labels: dict[str, str] | None = None,
) -> str:
    name = f"node-{uuid.uuid4().hex[:8]}"
    node = Node(
        metadata=ObjectMeta(name=name, labels=labels or {}),
        spec=NodeSpec(providerID=f"cn-hangzhou.{inst.id}"),
    )
    await client.create(node)
    await set_ready(client, name, ready, inst.private_ip)
    return name


async def set_ready(client: AsyncClient, name: str, ready: bool, ip: str) -> None:
    status = {
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "addresses": [{"type": "InternalIP", "address": ip}],
    }
    await client.patch(Node.Status, name, {"status": status}, patch_type=PatchType.MERGE)


async def device(client: AsyncClient, name: str) -> dict | None:
    try:
        return (await client.get(ERdmaDeviceResource, name)).to_dict()
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise


async def ready_device(client: AsyncClient, name: str) -> dict | None:
    obj = await device(client, name)
    return obj if obj and crd.parse(obj).all_ready else None
