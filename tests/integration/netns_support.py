"""Helpers for the per-test network namespace of conftest_netns (veths standing in for the
primary ENI and one ERI). The namespace holds:
- ``eth0`` (veth): the primary interface, 10.0.0.5/24, default route via 10.0.0.1 metric 300;
- ``eri0`` (veth, MAC ``MAC``): the ERI, down and unconfigured, its peer up.

Tests read it back with ``ip -j`` so what they check is what the kernel holds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

MAC = "00:16:3e:aa:bb:01"

NEEDS_NETNS = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 (ip) is not installed"),
]


def ip(ns: str, *args: str) -> str:
    return subprocess.run(
        ["ip", "-n", ns, *args], check=True, capture_output=True, text=True
    ).stdout


def ipj(ns: str, *args: str) -> list[dict]:
    return json.loads(ip(ns, "-j", *args) or "[]")


def path(ns: str) -> str:
    return f"/var/run/netns/{ns}"


def link(ns: str, dev: str) -> dict:
    (info,) = ipj(ns, "link", "show", "dev", dev)
    return info


def routes_via(ns: str, dev: str) -> list[dict]:
    return [r for r in ipj(ns, "route", "show") if r.get("dev") == dev]


def inet_addresses(ns: str, dev: str) -> list[str]:
    """The IPv4 addresses on ``dev``, as ``address/prefix``."""
    (info,) = ipj(ns, "addr", "show", "dev", dev)
    return [f"{a['local']}/{a['prefixlen']}" for a in info["addr_info"] if a["family"] == "inet"]
