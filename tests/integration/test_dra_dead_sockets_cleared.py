"""A starting agent removes the DRA sockets nobody serves any more, and only those.

An agent killed with SIGKILL leaves its sockets behind, and an agent of an earlier version used
the fixed names `<driver>-reg.sock` and `dra.sock`; the kubelet would keep probing them. The
next agent removes this driver's sockets that refuse connections, keeps the one another agent
of the driver still serves (a rolling update's other half), and never touches another
driver's."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from erdma.dra.names import DRIVER_NAME
from erdma.sim import fakehost
from tests.integration.dra_support import ClaimStore, new_driver
from tests.waiting import until


def dead(path: Path) -> Path:
    """A socket file whose process is gone: bound, never listened on, closed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
    return path


@pytest.fixture
def live(short_root: Path) -> Iterator[Path]:
    """Another agent's registration socket, still accepting connections."""
    path = short_root / "kubelet/plugins_registry" / f"{DRIVER_NAME}-0123456789ab-reg.sock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        sock.listen()
        yield path


async def test_dead_sockets_of_this_driver_go_live_and_foreign_ones_stay(short_root, live):
    registry, plugin = short_root / "kubelet/plugins_registry", short_root / "kubelet/plugins"
    gone = [
        dead(registry / f"{DRIVER_NAME}-reg.sock"),
        dead(registry / f"{DRIVER_NAME}-fedcba987654-reg.sock"),
        dead(plugin / DRIVER_NAME / "dra.sock"),
        dead(plugin / DRIVER_NAME / "dra-fedcba987654.sock"),
    ]
    foreign = [
        dead(registry / "gpu.example.com-reg.sock"),
        dead(plugin / "gpu.example.com" / "dra.sock"),
    ]
    host = fakehost.build(short_root / "host", "default")
    async with new_driver(short_root, host, store=ClaimStore()) as driver:
        await until(driver.registration_socket.is_socket, what="the agent's registration")
        assert not [p for p in gone if p.exists()]
        assert live.is_socket() and all(p.is_socket() for p in foreign)
        assert driver.dra_socket.is_socket()
