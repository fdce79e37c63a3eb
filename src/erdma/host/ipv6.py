"""Global IPv6 addresses per netdev, from /proc/net/if_inet6 under the host root."""

from __future__ import annotations

import os

from erdma.host.sysfs import HostRoot, read_text

SCOPE_GLOBAL = 0x00


def global_ipv6_netdevs(root: str | os.PathLike[str]) -> set[str]:
    """Netdevs with at least one global-scope IPv6 address.

    Each line of if_inet6 is `address ifindex prefixlen scope flags name` in hex; unparsable
    lines are ignored (the file is the kernel's, a fixture may hold anything).
    """
    text = read_text(HostRoot(root).path("proc/net/if_inet6")) or ""
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
