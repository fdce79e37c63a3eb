"""pytest plugin: an admin client of the test API server and a fresh Node for DRA slice tests.

Register it after ``tests.integration.conftest_kubeapi``. Each test gets its own Node (a
unique name); its slices of every driver are deleted with it.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from tests.fakes.kubeapi import KubeApiServer


@pytest.fixture
async def k8s(kube_api: KubeApiServer) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig), field_manager="test")
    yield client
    await client.close()


@pytest.fixture
async def node(k8s: AsyncClient) -> AsyncIterator[str]:
    name = f"dra-{uuid.uuid4().hex[:8]}"
    await k8s.create(Node(metadata=ObjectMeta(name=name)))
    yield name
    await k8s.delete(Node, name)
    async for s in k8s.list(ResourceSlice, fields={"spec.nodeName": name}):
        assert s.metadata is not None and s.metadata.name
        await k8s.delete(ResourceSlice, s.metadata.name)
