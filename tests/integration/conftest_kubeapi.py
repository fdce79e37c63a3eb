"""pytest plugin: one real kube-testserver (+ etcd) per test session, with the CRD installed.

Register it with ``pytest_plugins = ["tests.integration.conftest_kubeapi"]`` in a test module.
Tests share the server; each test creates its own Nodes (unique names) and cleans up after itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.fakes.kubeapi import KubeApiServer, install_crd
from tests.kubeapi_support import api_server_or_skip


@pytest.fixture(scope="session")
def kube_api() -> Iterator[KubeApiServer]:
    """A running API server with the ERdmaDevice CRD; skips only when it cannot start here."""
    server = api_server_or_skip()
    with server:
        asyncio.run(install_crd(server.kubeconfig))
        yield server
