"""Global IPv6 addresses per netdev, from /proc/net/if_inet6 under the host root."""

from __future__ import annotations

import os
from pathlib import Path

from erdma.host.sysfs import HostRoot

SCOPE_GLOBAL = 0x00


def _read_whole(path: Path) -> str:
    """The whole file, read to EOF, or "" when it cannot be read.

    Not `read_text`: that one caps at 4 KiB for sysfs attributes, and a busy node's
    if_inet6 (pod veths, link-locals) runs far past that; procfs reports size 0, so only
    reading until EOF gets it all.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def global_ipv6_netdevs(root: str | os.PathLike[str]) -> set[str]:
    """Netdevs with at least one global-scope IPv6 address.

    Each line of if_inet6 is `address ifindex prefixlen scope flags name` in hex; unparsable
    lines are ignored (the file is the kernel's, a fixture may hold anything).
    """
    text = _read_whole(HostRoot(root).path("proc/net/if_inet6"))
    names = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 6:
            continue
        try:
            scope = int(fields[3], 16)
        except ValueError:
            continue
        if scope == SCOPE_GLOBAL:
            names.add(fields[5])
    return names
