"""The ``netns`` fixture: a fresh network namespace per test (see netns_support)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import pytest

from tests.integration.netns_support import MAC, ip


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"erdma-t-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        ip(name, "link", "set", "lo", "up")
        ip(name, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p")
        ip(name, "link", "set", "eth0p", "up")
        ip(name, "link", "set", "eth0", "up")
        ip(name, "addr", "add", "10.0.0.5/24", "dev", "eth0")
        ip(name, "route", "add", "default", "via", "10.0.0.1", "dev", "eth0", "metric", "300")
        ip(name, "link", "add", "eri0", "type", "veth", "peer", "name", "eri0p")
        ip(name, "link", "set", "eri0", "address", MAC)
        ip(name, "link", "set", "eri0p", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
