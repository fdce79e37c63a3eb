"""Loopback ports for test servers that must be told their port before they start.

etcd, kube-testserver (through its start.sh), a controller's health and webhook ports: each is
given a number and binds it seconds later, so "bind port 0, read the number, close" races with
every other socket on the machine. The kernel hands out ports of its ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 here) to every connect and every
bind to port 0, so under load another process took etcd's port in between ("address already in
use"). Two rules close that gap:

* ports come from below the ephemeral range, which the kernel never hands out by itself;
* each port handed out is held by an exclusive ``flock`` on a file in a shared directory for the
  life of the process that asked, so parallel test processes (two suites, xdist workers) never
  hand out the same one.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

LOCK_DIR = Path(tempfile.gettempdir()) / "erdma-test-ports"
LOWEST = 10000
#: fixed ports of the shared tools (kube-testserver, kubelet and their self-tests): never ours
TOOL_PORTS = frozenset({16443, 23790, 23791, 20248, 20250, 26443, 27790, 27791})
_held: dict[int, int] = {}  # port -> fd of its lock file, open until the process exits


class NoFreePort(RuntimeError):
    """No port could be reserved: the range below the ephemeral ports is used up."""


def _ephemeral_low(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _lock(port: int) -> bool:
    """Hold ``port`` for this process; False when another process holds it."""
    if port in _held:
        return False
    LOCK_DIR.mkdir(mode=0o1777, exist_ok=True)
    fd = os.open(LOCK_DIR / str(port), os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
            return False
        raise
    _held[port] = fd
    return True


def _unlock(port: int) -> None:
    os.close(_held.pop(port))


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(pair: bool = False) -> int:
    """A loopback port reserved for this process (with ``pair``, the next one too, for etcd's
    peer port), free now and never handed out by the kernel to another socket."""
    high = _ephemeral_low() - 2
    if high <= LOWEST:
        raise NoFreePort(f"ephemeral port range starts at {high + 2}: no room below it")
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(LOWEST, high)
        wanted = [port, port + 1] if pair else [port]
        if TOOL_PORTS.intersection(wanted):
            continue
        locked = [p for p in wanted if _lock(p)]
        if len(locked) == len(wanted) and all(map(_bindable, wanted)):
            return port
        for p in locked:
            _unlock(p)
    raise NoFreePort(f"no free loopback port between {LOWEST} and {high}")
