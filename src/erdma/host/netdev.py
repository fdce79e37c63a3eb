"""Bring up the network device of a secondary ERI (Regular mode), with pyroute2.

A secondary ERI appears in the OS as a plain Ethernet device that nobody configures: no address,
often down. RDMA over it needs the address the VPC assigned, a subnet route and a default route
that never outranks the primary interface's. The rules follow the reference agent:

- find the device by MAC; skip it when it is already up with a non-link-local address (only the
  jumbo MTU is applied then), so a second run and an OS-configured device are left alone;
- otherwise set the MTU (jumbo frames), bring it up, add the address, delete the kernel's
  automatic prefix route and add a scope-link subnet route and a default route via the gateway,
  each with metric ``max(existing metrics for that destination) + 1`` and at least 200;
- on any error put the device down again, so a half-configured interface cannot steal traffic.

Everything runs in one network namespace: the host's by default, or the one at ``netns`` (a
path such as ``/var/run/netns/x``), which is how the tests use a real namespace with a veth.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from erdma.host.metadata import EniNetwork

log = logging.getLogger(__name__)

MIN_ROUTE_METRIC = 200
MAIN_TABLE = 254
SCOPE_LINK = 253
PROTO_KERNEL = 2
IFF_UP = 0x1


class NetdevError(RuntimeError):
    """The device could not be configured; the message names the device and the step."""


@dataclass(frozen=True)
class NetdevResult:
    """What ``configure_eri_netdev`` did, for the agent's log."""

    ifname: str
    action: Literal["configured", "already-up"]
    subnet_metric: int | None = None
    default_metric: int | None = None


@contextmanager
def _ipr(netns: str | None) -> Iterator[Any]:
    ipr = IPRoute(netns=netns, flags=0) if netns else IPRoute()
    try:
        yield ipr
    finally:
        ipr.close()


def find_link(ipr: Any, mac: str) -> Any:
    """The link message whose hardware address is ``mac``; NetdevError when none is."""
    want = mac.lower()
    for link in ipr.get_links():
        if (link.get_attr("IFLA_ADDRESS") or "").lower() == want:
            return link
    raise NetdevError(f"no network device with MAC {mac}; is the ERI attached to this node?")


def present_macs(macs: Iterable[str], netns: str | None = None) -> frozenset[str]:
    """Which of ``macs`` (lower-cased) belong to a network device in this namespace: Local mode
    configures only those, a device moved into another namespace is someone else's."""
    with _ipr(netns) as ipr:
        here = {(link.get_attr("IFLA_ADDRESS") or "").lower() for link in ipr.get_links()}
    return frozenset(m.lower() for m in macs) & here


def _global_addresses(ipr: Any, index: int) -> list[str]:
    """Addresses that are neither link-local (fe80::/10, 169.254/16) nor host-scoped."""
    found = []
    for msg in ipr.get_addr(index=index):
        addr = msg.get_attr("IFA_ADDRESS")
        if addr and not ipaddress.ip_address(addr).is_link_local and msg["scope"] == 0:
            found.append(addr)
    return found


def _routes_to(ipr: Any, dst: ipaddress.IPv4Network) -> list[Any]:
    """Main-table IPv4 routes whose destination is exactly ``dst``."""
    out = []
    for r in ipr.get_routes(family=socket.AF_INET, table=MAIN_TABLE):
        if r["dst_len"] != dst.prefixlen:
            continue
        if (r.get_attr("RTA_DST") or "0.0.0.0") == str(dst.network_address):
            out.append(r)
    return out


def _ensure_route(ipr: Any, dst: ipaddress.IPv4Network, index: int, **extra: Any) -> int:
    """Add a route to ``dst`` via ``index`` unless one exists; returns its metric."""
    existing = _routes_to(ipr, dst)
    for r in existing:
        same_gw = r.get_attr("RTA_GATEWAY") == extra.get("gateway")
        if r.get_attr("RTA_OIF") == index and r["proto"] != PROTO_KERNEL and same_gw:
            return int(r.get_attr("RTA_PRIORITY") or 0)
    metrics = [int(r.get_attr("RTA_PRIORITY") or 0) for r in existing]
    metric = max([MIN_ROUTE_METRIC, *(m + 1 for m in metrics)])
    ipr.route(
        "add",
        dst=str(dst.network_address),
        dst_len=dst.prefixlen,
        oif=index,
        priority=metric,
        table=MAIN_TABLE,
        **extra,
    )
    return metric


def _delete_kernel_prefix_route(ipr: Any, net: ipaddress.IPv4Network, index: int) -> None:
    for r in _routes_to(ipr, net):
        if r.get_attr("RTA_OIF") == index and r["proto"] == PROTO_KERNEL:
            ipr.route(
                "del",
                dst=str(net.network_address),
                dst_len=net.prefixlen,
                oif=index,
                proto=PROTO_KERNEL,
                scope=r["scope"],
                table=MAIN_TABLE,
                priority=r.get_attr("RTA_PRIORITY") or 0,
            )


def configure_eri_netdev(
    mac: str, net: EniNetwork, mtu: int | None = None, netns: str | None = None
) -> NetdevResult:
    """Configure the device with ``mac`` for ``net``; see the module docstring for the rules."""
    with _ipr(netns) as ipr:
        link = find_link(ipr, mac)
        index = int(link["index"])
        name = str(link.get_attr("IFLA_IFNAME"))
        oper_up = link.get_attr("IFLA_OPERSTATE") == "UP" and bool(link["flags"] & IFF_UP)
        addresses = _global_addresses(ipr, index)
        if oper_up and addresses:
            if mtu:
                ipr.link("set", index=index, mtu=mtu)
            if net.address not in addresses:
                log.error(
                    "%s (%s) is up with %s but not with the VPC address %s; another network "
                    "agent may manage it (exclude ERIs from it, e.g. terway's ENI whitelist)",
                    name,
                    mac,
                    ", ".join(addresses),
                    net.address,
                )
            return NetdevResult(name, "already-up")
        step = "set MTU"
        try:
            if mtu:
                ipr.link("set", index=index, mtu=mtu)
            step = "set link up"
            ipr.link("set", index=index, state="up")
            step = f"add address {net.address}/{net.prefix_len}"
            if net.address not in addresses:
                ipr.addr("add", index=index, address=net.address, prefixlen=net.prefix_len)
            step = "delete the kernel prefix route"
            _delete_kernel_prefix_route(ipr, net.network, index)
            step = f"add subnet route {net.network}"
            subnet_metric = _ensure_route(ipr, net.network, index, scope=SCOPE_LINK)
            step = f"add default route via {net.gateway}"
            default_metric = _ensure_route(
                ipr, ipaddress.IPv4Network("0.0.0.0/0"), index, gateway=net.gateway
            )
        except (NetlinkError, OSError, ValueError) as exc:
            try:
                ipr.link("set", index=index, state="down")
            except (NetlinkError, OSError) as down_exc:
                log.error("could not set %s down after a failure: %s", name, down_exc)
            raise NetdevError(f"{name} ({mac}): {step} failed: {exc}; link set down") from exc
        log.info(
            "configured %s (%s): %s/%d, subnet metric %d, default via %s metric %d",
            name,
            mac,
            net.address,
            net.prefix_len,
            subnet_metric,
            net.gateway,
            default_metric,
        )
        return NetdevResult(name, "configured", subnet_metric, default_metric)
