"""The rtnetlink codec against the kernel of a real network namespace (conftest_netns), read
back with ``ip -j``: what `Rtnl` lists is what iproute2 lists, what it changes the kernel holds,
and a refusal names the request and the kernel's reason."""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Callable
from typing import TypeVar

import pytest

from erdma.host.netdev import with_rtnl
from erdma.host.netlink.core import NetlinkError, done_message, pack_message
from erdma.host.netlink.rtnl import RTM_NEWROUTE, RTMSG, Route, Rtnl
from tests.integration.netns_support import MAC, NEEDS_NETNS, ip, ipj, link, path, routes_via

pytest_plugins = ["tests.integration.conftest_netns"]

T = TypeVar("T")


def in_ns(ns: str, work: Callable[[Rtnl], T]) -> T:
    return with_rtnl(path(ns), work)


class TestAgainstTheKernel:
    pytestmark = NEEDS_NETNS

    def test_links_match_iproute2(self, netns):
        ours = {(x.index, x.name, x.mac) for x in in_ns(netns, lambda r: r.links())}
        theirs = {(x["ifindex"], x["ifname"], x["address"]) for x in ipj(netns, "link", "show")}
        assert ours == theirs
        eri0 = next(x for x in in_ns(netns, lambda r: r.links()) if x.mac == MAC)
        assert not eri0.oper_up  # down and unconfigured
        eth0 = next(x for x in in_ns(netns, lambda r: r.links()) if x.name == "eth0")
        assert eth0.oper_up

    def test_routes_and_addresses_read_back_as_the_namespace_was_set_up(self, netns):
        eth0 = link(netns, "eth0")["ifindex"]
        routes = in_ns(netns, lambda r: r.routes(254))
        assert {(str(x.dst), x.gateway, x.priority) for x in routes if x.oif == eth0} == {
            ("10.0.0.0/24", None, 0),
            ("0.0.0.0/0", "10.0.0.1", 300),
        }
        assert [
            (a.address, a.prefix_len)
            for a in in_ns(netns, lambda r: r.addresses(eth0))
            if ":" not in a.address
        ] == [("10.0.0.5", 24)]
        # the local table (255) holds the address's own /32, and none of the main table's routes
        local = {str(x.dst) for x in in_ns(netns, lambda r: r.routes(255)) if x.oif == eth0}
        assert "10.0.0.5/32" in local and "0.0.0.0/0" not in local

    def test_changes_reach_the_kernel(self, netns):
        index = link(netns, "eri0")["ifindex"]
        subnet = ipaddress.IPv4Network("10.7.0.0/16")

        def change(rtnl: Rtnl) -> None:
            rtnl.set_link(index, mtu=4000)
            rtnl.set_link(index, up=True)
            rtnl.add_address(index, "10.7.0.9", 16)
            rtnl.add_route(Route(subnet, 254, 0, 253, index, None, 250))

        in_ns(netns, change)
        info = link(netns, "eri0")
        assert info["mtu"] == 4000 and "UP" in info["flags"]
        extra = [r for r in routes_via(netns, "eri0") if r["dst"] == "10.7.0.0/16"]
        assert {(r["protocol"], r.get("metric", 0)) for r in extra} == {
            ("kernel", 0),
            ("static", 250),
        }
        kernel = next(
            x for x in in_ns(netns, lambda r: r.routes(254)) if x.dst == subnet and x.protocol == 2
        )
        in_ns(netns, lambda r: r.delete_route(kernel))
        assert [
            r.get("metric") for r in routes_via(netns, "eri0") if r["dst"] == "10.7.0.0/16"
        ] == [250]

    def test_refusals_name_the_request_and_the_reason(self, netns):
        index = link(netns, "eri0")["ifindex"]
        ip(netns, "addr", "add", "10.8.0.1/24", "dev", "eri0")
        with pytest.raises(NetlinkError, match=r"add address 10\.8\.0\.1/24: File exists"):
            in_ns(netns, lambda r: r.add_address(index, "10.8.0.1", 24))
        unreachable = Route(ipaddress.IPv4Network("0.0.0.0/0"), 254, 0, 0, index, "192.0.2.1", 9)
        with pytest.raises(NetlinkError, match=r"add route 0\.0\.0\.0/0: Network is unreachable"):
            in_ns(netns, lambda r: r.add_route(unreachable))
        with pytest.raises(NetlinkError, match=r"set link 999999: No such device"):
            in_ns(netns, lambda r: r.set_link(999999, up=True))


class Replay:
    """Answers every request with the bytes it was given (a kernel reply captured by hand)."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply

    def exchange(self, request: bytes) -> bytes:
        return self.reply


def route_message(table: int, rta_table: int | None) -> bytes:
    payload = RTMSG.pack(socket.AF_INET, 8, 0, 0, table, 4, 0, 1, 0)
    payload += struct.pack("=HH4s", 8, 1, bytes([10, 0, 0, 0]))  # RTA_DST 10.0.0.0
    if rta_table is not None:
        payload += struct.pack("=HHI", 8, 15, rta_table)  # RTA_TABLE
    return pack_message(RTM_NEWROUTE, 2, payload)


def test_table_ids_above_255_are_read_from_the_attribute():
    """rtm_table is one byte; a table such as 1000 travels as RTA_TABLE with rtm_table 0
    (RT_TABLE_UNSPEC): it must not be mistaken for another table."""
    reply = route_message(0, 1000) + route_message(254, None) + done_message()
    rtnl = Rtnl(Replay(reply))
    assert [str(r.dst) for r in rtnl.routes(1000)] == ["10.0.0.0/8"]
    assert [r.table for r in rtnl.routes(254)] == [254]


def test_a_truncated_reply_is_an_error_not_a_partial_list():
    reply = route_message(254, None)[:-6]
    with pytest.raises(ValueError, match="truncated netlink"):
        Rtnl(Replay(reply)).routes(254)
