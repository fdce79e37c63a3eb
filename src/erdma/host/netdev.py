"""Bring up the network device of a secondary ERI (Regular mode), over rtnetlink.

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
path such as ``/var/run/netns/x``, entered by a short-lived thread), which is how the tests use
a real namespace with a veth.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, TypeVar

from erdma.host.metadata import EniNetwork
from erdma.host.netlink.core import NetlinkSocket
from erdma.host.netlink.rtnl import IFF_UP, NETLINK_ROUTE, Address, Link, Route, Rtnl
from erdma.host.netns import run_in_netns

log = logging.getLogger(__name__)

MIN_ROUTE_METRIC = 200
MAIN_TABLE = 254
SCOPE_LINK = 253
PROTO_KERNEL = 2


class NetdevError(RuntimeError):
    """The device could not be configured; the message names the device and the step."""


@dataclass(frozen=True)
class NetdevResult:
    """What ``configure_eri_netdev`` did, for the agent's log."""

    ifname: str
    action: Literal["configured", "already-up"]
    subnet_metric: int | None = None
    default_metric: int | None = None


T = TypeVar("T")


def with_rtnl(netns: str | None, work: Callable[[Rtnl], T]) -> T:
    """Run ``work`` with an rtnetlink socket opened in ``netns`` (None: this namespace)."""

    def opened() -> T:
        with NetlinkSocket(NETLINK_ROUTE) as sock:
            return work(Rtnl(sock))

    return run_in_netns(netns, opened)


def find_link(rtnl: Rtnl, mac: str) -> Link:
    """The link whose hardware address is ``mac``; NetdevError when none is."""
    want = mac.lower()
    for link in rtnl.links():
        if link.mac == want:
            return link
    raise NetdevError(f"no network device with MAC {mac}; is the ERI attached to this node?")


def present_macs(macs: Iterable[str], netns: str | None = None) -> frozenset[str]:
    """Which of ``macs`` (lower-cased) belong to a network device in this namespace: Local mode
    configures only those, a device moved into another namespace is someone else's."""
    here = with_rtnl(netns, lambda rtnl: {link.mac for link in rtnl.links()})
    return frozenset(m.lower() for m in macs) & here


def addresses_of(mac: str, netns: str | None = None) -> tuple[str, ...]:
    """The global addresses, in CIDR notation, of the network device whose MAC is ``mac``;
    none when no device in ``netns`` has it (an agent outside the host's network namespace
    sees only its own devices, so it matches by MAC, never by a name another device may have)."""

    def read(rtnl: Rtnl) -> tuple[str, ...]:
        link = next((li for li in rtnl.links() if li.mac == mac.lower()), None)
        if link is None:
            return ()
        return tuple(f"{a.address}/{a.prefix_len}" for a in _global(rtnl, link.index))

    return with_rtnl(netns, read)


def _global(rtnl: Rtnl, index: int) -> list[Address]:
    """Addresses that are neither link-local (fe80::/10, 169.254/16) nor host-scoped."""
    return [
        a
        for a in rtnl.addresses(index)
        if not ipaddress.ip_address(a.address).is_link_local and a.scope == 0
    ]


def _routes_to(rtnl: Rtnl, dst: ipaddress.IPv4Network) -> list[Route]:
    """Main-table IPv4 routes whose destination is exactly ``dst``."""
    return [r for r in rtnl.routes(MAIN_TABLE) if r.dst == dst]


def _ensure_route(
    rtnl: Rtnl, dst: ipaddress.IPv4Network, index: int, scope: int = 0, gateway: str | None = None
) -> int:
    """Add a route to ``dst`` via ``index`` unless one exists; returns its metric."""
    existing = _routes_to(rtnl, dst)
    for r in existing:
        if r.oif == index and r.protocol != PROTO_KERNEL and r.gateway == gateway:
            return r.priority
    metric = max([MIN_ROUTE_METRIC, *(r.priority + 1 for r in existing)])
    rtnl.add_route(Route(dst, MAIN_TABLE, 0, scope, index, gateway, metric))
    return metric


def _delete_kernel_prefix_route(rtnl: Rtnl, net: ipaddress.IPv4Network, index: int) -> None:
    for r in _routes_to(rtnl, net):
        if r.oif == index and r.protocol == PROTO_KERNEL:
            rtnl.delete_route(r)


def configure_eri_netdev(
    mac: str, net: EniNetwork, mtu: int | None = None, netns: str | None = None
) -> NetdevResult:
    """Configure the device with ``mac`` for ``net``; see the module docstring for the rules."""
    return with_rtnl(netns, lambda rtnl: _configure(rtnl, mac, net, mtu))


def _configure(rtnl: Rtnl, mac: str, net: EniNetwork, mtu: int | None) -> NetdevResult:
    link = find_link(rtnl, mac)
    index, name = link.index, link.name
    addresses = [a.address for a in _global(rtnl, index)]
    if link.oper_up and link.flags & IFF_UP and addresses:
        if mtu:
            rtnl.set_link(index, mtu=mtu)
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
            rtnl.set_link(index, mtu=mtu)
        step = "set link up"
        rtnl.set_link(index, up=True)
        step = f"add address {net.address}/{net.prefix_len}"
        if net.address not in addresses:
            rtnl.add_address(index, net.address, net.prefix_len)
        step = "delete the kernel prefix route"
        _delete_kernel_prefix_route(rtnl, net.network, index)
        step = f"add subnet route {net.network}"
        subnet_metric = _ensure_route(rtnl, net.network, index, scope=SCOPE_LINK)
        step = f"add default route via {net.gateway}"
        default_metric = _ensure_route(
            rtnl, ipaddress.IPv4Network("0.0.0.0/0"), index, gateway=net.gateway
        )
    except (OSError, ValueError) as exc:  # core.NetlinkError is an OSError
        try:
            rtnl.set_link(index, up=False)
        except OSError as down_exc:
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
