"""pytest plugin: the fixtures of the ``erdma controller`` end-to-end tests.

Register it with ``pytest_plugins = ["tests.integration.conftest_kubeapi",
"tests.integration.conftest_controller"]`` in a test module. ``emu`` is a fresh emulated ECS
region per test; ``k8s`` is a client of the shared kube-testserver that deletes every Node and
ERdmaDevice before the test and afterwards: a controller reconciles every Node it sees, so a
Node another test on this worker left behind (one that did not clear, or cleared while its
controller still wrote) would otherwise be given ERIs and counted in this test's figures. The
helpers live apart, in ``controller_support``, because a module the tests import directly cannot
also be a plugin whose asserts pytest rewrites.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from lightkube import AsyncClient, KubeConfig

from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import standard_world
from tests.integration.controller_rig import clear_cluster


@pytest.fixture
def emu():
    with EcsEmulator(standard_world()).in_thread() as emulator:
        yield emulator


@pytest.fixture
async def k8s(kube_api) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    await clear_cluster(client)
    yield client
    await clear_cluster(client)
    await client.close()
