"""The controller tests' ``k8s`` fixture hands each test an empty cluster.

A controller reconciles every Node it sees. A Node left on the worker's shared API server by an
earlier test once got ERIs from the next test's controller and doubled its
``CreateNetworkInterface`` count; this test leaves such a Node and asks for the fixture after.
The cause was two plugins defining ``k8s`` (pytest keeps one fixture per name across plugins,
the one registered last): the DRA tests' plugin is registered here too, after the controller's.
"""

from __future__ import annotations

import asyncio

import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node

pytest_plugins = [
    "tests.integration.conftest_kubeapi",
    "tests.integration.conftest_controller",
    "tests.integration.conftest_dra_api",
]


async def _leave_a_node(kubeconfig) -> str:
    client = AsyncClient(KubeConfig.from_file(kubeconfig))
    try:
        node = await client.create(Node(metadata=ObjectMeta(name="left-by-an-earlier-test")))
        assert node.metadata is not None and node.metadata.name is not None
        return node.metadata.name
    finally:
        await client.close()


async def _node_names(kubeconfig) -> list[str]:
    client = AsyncClient(KubeConfig.from_file(kubeconfig))
    try:
        return [n.metadata.name async for n in client.list(Node) if n.metadata and n.metadata.name]
    finally:
        await client.close()


def test_a_node_an_earlier_test_left_is_gone_when_the_next_test_starts(
    kube_api, request: pytest.FixtureRequest
) -> None:
    left = asyncio.run(_leave_a_node(kube_api.kubeconfig))
    request.getfixturevalue("k8s")
    assert left not in asyncio.run(_node_names(kube_api.kubeconfig))
