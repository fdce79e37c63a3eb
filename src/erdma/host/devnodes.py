"""Probing /dev character nodes: whether a process here could actually use a device.

sysfs says a device exists; only stat and open on its node say whether this /dev has it, whether
it is the node the driver registered, and whether the device cgroup lets us open it.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from erdma.host.model import CharDevice
from erdma.host.sysfs import HostRoot


@dataclass(frozen=True)
class NodeProbe:
    """What opening a char node read-write showed. `problem` is None when it opened."""

    path: str
    missing: bool = False
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return not self.missing and self.problem is None


def probe_node(host: HostRoot, char: CharDevice) -> NodeProbe:
    """Open the node O_RDWR: tells "missing" from "present but no driver" from "not allowed"."""
    path = host.path(char.path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return NodeProbe(char.path, missing=True, problem="missing")
    except OSError as exc:
        return NodeProbe(char.path, problem=f"cannot be examined ({_errno(exc)})")
    if not stat.S_ISCHR(info.st_mode):
        return NodeProbe(char.path, problem="is not a character device")
    actual = (os.major(info.st_rdev), os.minor(info.st_rdev))
    if char.major is not None and actual != (char.major, char.minor):
        return NodeProbe(
            char.path,
            problem=f"is {actual[0]}:{actual[1]} but sysfs says {char.dev}: a stale node "
            "left from before a driver reload",
        )
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENODEV):
            return NodeProbe(
                char.path, problem=f"is present but no driver is behind it ({_errno(exc)})"
            )
        if exc.errno in (errno.EACCES, errno.EPERM):
            return NodeProbe(
                char.path,
                problem=f"is present but may not be opened ({_errno(exc)}: the device cgroup "
                "does not allow it, or /dev is mounted nodev)",
            )
        return NodeProbe(char.path, problem=f"cannot be opened ({_errno(exc)})")
    os.close(fd)
    return NodeProbe(char.path)


def _errno(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "error")
    return f"{name}: {exc.strerror}" if exc.strerror else name
