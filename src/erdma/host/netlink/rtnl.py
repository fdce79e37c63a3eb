"""Route netlink (rtnetlink): the link, address and route requests an ERI bring-up needs.

Layouts follow include/uapi/linux/rtnetlink.h, if_link.h, if_addr.h and if.h (ifinfomsg,
ifaddrmsg, rtmsg and their attributes). Written here rather than taken from a netlink library
because the node agent needs only these few requests, and the library it replaced cost the
agent ~9.5 MiB of resident memory for them (bench/RESULTS.md).
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass

from erdma.host.netlink.core import (
    NLM_F_ACK,
    NLM_F_DUMP,
    NLM_F_REQUEST,
    Transport,
    attr_map,
    exchange,
    pack_attr,
    pack_message,
)

NETLINK_ROUTE = 0
RTM_NEWLINK, RTM_GETLINK = 16, 18
RTM_NEWADDR, RTM_GETADDR = 20, 22
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400

IFINFOMSG = struct.Struct("=BxHiII")  # family, pad, type, index, flags, change
IFADDRMSG = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, index
RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, scope,
# type, flags
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_OPERSTATE = 1, 3, 4, 16
IFA_ADDRESS, IFA_LOCAL = 1, 2
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_TABLE = 1, 4, 5, 6, 15
IFF_UP = 0x1
IF_OPER_UP = 6
RTPROT_STATIC = 4
RTN_UNICAST = 1
U32 = struct.Struct("=I")


@dataclass(frozen=True)
class Link:
    index: int
    name: str
    mac: str  # lower-case, colon-separated; "" for a device without a hardware address
    flags: int  # IFF_*
    oper_up: bool  # IFLA_OPERSTATE is IF_OPER_UP (carrier and admin state both up)


@dataclass(frozen=True)
class Address:
    index: int
    address: str
    prefix_len: int
    scope: int


@dataclass(frozen=True)
class Route:
    dst: ipaddress.IPv4Network
    table: int
    protocol: int
    scope: int
    oif: int | None
    gateway: str | None
    priority: int


def _u32(value: bytes | None) -> int | None:
    return None if value is None else int(U32.unpack_from(value)[0])


def _ip(value: bytes | None) -> str | None:
    return None if value is None else str(ipaddress.ip_address(value))


class Rtnl:
    """rtnetlink requests over one transport (a `NetlinkSocket(NETLINK_ROUTE)` opened in the
    namespace to change); a kernel refusal raises `core.NetlinkError` naming the request."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._seq = 0

    def _request(self, msg_type: int, flags: int, payload: bytes, what: str) -> list[bytes]:
        self._seq += 1
        request = pack_message(msg_type, NLM_F_REQUEST | flags, payload, self._seq)
        return [m.payload for m in exchange(self.transport, request, what)]

    def links(self) -> list[Link]:
        out = []
        for payload in self._request(
            RTM_GETLINK, NLM_F_DUMP, IFINFOMSG.pack(0, 0, 0, 0, 0), "list links"
        ):
            _family, _type, index, flags, _change = IFINFOMSG.unpack_from(payload)
            attrs = attr_map(payload[IFINFOMSG.size :])
            name = attrs.get(IFLA_IFNAME, b"").split(b"\0", 1)[0].decode(errors="replace")
            mac = ":".join(f"{b:02x}" for b in attrs.get(IFLA_ADDRESS, b""))
            oper = (attrs.get(IFLA_OPERSTATE) or b"\0")[0]
            out.append(Link(index, name, mac, flags, oper == IF_OPER_UP))
        return out

    def addresses(self, index: int) -> list[Address]:
        """Every address on the link with ``index``, IPv4 and IPv6."""
        out = []
        for payload in self._request(
            RTM_GETADDR, NLM_F_DUMP, IFADDRMSG.pack(0, 0, 0, 0, 0), "list addresses"
        ):
            _family, prefix_len, _flags, scope, on = IFADDRMSG.unpack_from(payload)
            attrs = attr_map(payload[IFADDRMSG.size :])
            address = _ip(attrs.get(IFA_ADDRESS, attrs.get(IFA_LOCAL)))
            if on == index and address:
                out.append(Address(on, address, prefix_len, scope))
        return out

    def routes(self, table: int) -> list[Route]:
        """The IPv4 routes of ``table``."""
        out = []
        request = RTMSG.pack(socket.AF_INET, 0, 0, 0, 0, 0, 0, 0, 0)
        for payload in self._request(RTM_GETROUTE, NLM_F_DUMP, request, "list routes"):
            _f, dst_len, _s, _tos, rtm_table, protocol, scope, _type, _fl = RTMSG.unpack_from(
                payload
            )
            attrs = attr_map(payload[RTMSG.size :])
            if (_u32(attrs.get(RTA_TABLE)) or rtm_table) != table:
                continue
            dst = ipaddress.IPv4Network((_ip(attrs.get(RTA_DST)) or "0.0.0.0", dst_len))
            out.append(
                Route(
                    dst,
                    table,
                    protocol,
                    scope,
                    _u32(attrs.get(RTA_OIF)),
                    _ip(attrs.get(RTA_GATEWAY)),
                    _u32(attrs.get(RTA_PRIORITY)) or 0,
                )
            )
        return out

    def set_link(self, index: int, *, mtu: int | None = None, up: bool | None = None) -> None:
        """Change the link's MTU and/or its administrative state (``ip link set``)."""
        flags = IFF_UP if up else 0
        change = IFF_UP if up is not None else 0
        attrs = pack_attr(IFLA_MTU, U32.pack(mtu)) if mtu else b""
        payload = IFINFOMSG.pack(0, 0, index, flags, change) + attrs
        self._request(RTM_NEWLINK, NLM_F_ACK, payload, f"set link {index}")

    def add_address(self, index: int, address: str, prefix_len: int) -> None:
        raw = ipaddress.IPv4Address(address).packed
        payload = IFADDRMSG.pack(socket.AF_INET, prefix_len, 0, 0, index)
        payload += pack_attr(IFA_LOCAL, raw) + pack_attr(IFA_ADDRESS, raw)
        flags = NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
        self._request(RTM_NEWADDR, flags, payload, f"add address {address}/{prefix_len}")

    def add_route(self, route: Route) -> None:
        """Add ``route``; a route whose protocol is 0 is added as RTPROT_STATIC."""
        protocol = route.protocol or RTPROT_STATIC
        flags = NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
        self._request(RTM_NEWROUTE, flags, self._route(route, protocol), f"add route {route.dst}")

    def delete_route(self, route: Route) -> None:
        self._request(
            RTM_DELROUTE, NLM_F_ACK, self._route(route, route.protocol), f"delete route {route.dst}"
        )

    @staticmethod
    def _route(route: Route, protocol: int) -> bytes:
        table = route.table if route.table < 256 else 0  # larger ids travel in RTA_TABLE only
        payload = RTMSG.pack(
            socket.AF_INET,
            route.dst.prefixlen,
            0,
            0,
            table,
            protocol,
            route.scope,
            RTN_UNICAST,
            0,
        )
        if route.dst.prefixlen:
            payload += pack_attr(RTA_DST, route.dst.network_address.packed)
        payload += pack_attr(RTA_TABLE, U32.pack(route.table))
        payload += pack_attr(RTA_PRIORITY, U32.pack(route.priority))
        if route.oif is not None:
            payload += pack_attr(RTA_OIF, U32.pack(route.oif))
        if route.gateway:
            payload += pack_attr(RTA_GATEWAY, ipaddress.IPv4Address(route.gateway).packed)
        return payload
