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
async def admin(kube_api: KubeApiServer) -> AsyncIterator[AsyncClient]:
    """A client with full rights (named apart from the controller tests' ``k8s``: fixtures of
    plugins share one namespace, and the later plugin's would win)."""
    client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig), field_manager="test")
    yield client
    await client.close()


@pytest.fixture
async def node(admin: AsyncClient) -> AsyncIterator[str]:
    name = f"dra-{uuid.uuid4().hex[:8]}"
    await admin.create(Node(metadata=ObjectMeta(name=name)))
    yield name
    await admin.delete(Node, name)
    async for s in admin.list(ResourceSlice, fields={"spec.nodeName": name}):
        assert s.metadata is not None and s.metadata.name
        await admin.delete(ResourceSlice, s.metadata.name)
