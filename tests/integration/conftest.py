"""Shared fixtures for integration tests: short kubelet root dirs and a running fake kubelet."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from erdma.testing.kubelet import FakeKubelet


@pytest.fixture
def kubelet_root() -> Iterator[Path]:
    """A kubelet root dir under /tmp: unix socket paths must stay under 108 bytes."""
    root = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def plugin_dir(kubelet_root: Path) -> Path:
    return kubelet_root / "device-plugins"


@pytest.fixture
async def kubelet(plugin_dir: Path) -> AsyncIterator[FakeKubelet]:
    async with FakeKubelet(plugin_dir) as fake:
        yield fake
