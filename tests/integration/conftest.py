"""Shared fixtures for integration tests: short root dirs under /tmp, a running fake kubelet,
and the real agent serving a simulated node."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from erdma.api.names import ERDMA_RESOURCE
from erdma.sim.kubelet import FakeKubelet
from erdma.sim.node import SimulatedNode


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A fresh directory under /tmp: unix socket paths below it must stay under 108 bytes."""
    root = Path(tempfile.mkdtemp(prefix="erdma-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def kubelet_root(short_root: Path) -> Path:
    """A kubelet root dir (``short_root``)."""
    return short_root


@pytest.fixture
def plugin_dir(kubelet_root: Path) -> Path:
    return kubelet_root / "device-plugins"


@pytest.fixture
async def kubelet(plugin_dir: Path) -> AsyncIterator[FakeKubelet]:
    async with FakeKubelet(plugin_dir) as fake:
        yield fake


@pytest.fixture
async def serving_node(short_root: Path) -> AsyncIterator[SimulatedNode]:
    """The real agent on the default simulated node (2 devices x 2 slots), registered and
    listed with the kubelet stand-in; stopped afterwards."""
    node = SimulatedNode(short_root / "node", "default", ["--slots-per-device", "2"])
    await node.start()
    await node.wait_registered(ERDMA_RESOURCE)
    yield node
    await node.stop()
