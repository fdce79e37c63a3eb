"""Codec for SMC socket listing over NETLINK_SOCK_DIAG (uapi linux/smc_diag.h), as smcss does.

The kernel answers only dump requests and only with sockets of the diag socket's own network
namespace, so inspecting a pod means opening the socket inside the pod's namespace.
"""

from __future__ import annotations

import ipaddress
import os
import struct
from dataclasses import dataclass

from erdma.host.netlink import core

AF_SMC = 43
SOCK_DIAG_BY_FAMILY = 20

SMC_DIAG_CONNINFO = 1
SMC_DIAG_LGRINFO = 2
SMC_DIAG_SHUTDOWN = 3
SMC_DIAG_DMBINFO = 4
SMC_DIAG_FALLBACK = 5

MODE_SMCR = 0
MODE_FALLBACK_TCP = 1
MODE_SMCD = 2

REQUEST = struct.Struct("=BxxB48s")  # family, pad[2], diag_ext, inet_diag_sockid (zeroed)
MSG_HEAD = struct.Struct("=BBBB")  # family, state, mode, shutdown
SOCKID = struct.Struct(">HH16s16s")  # sport, dport (be16), src[4], dst[4] (be32)
MSG_TAIL = struct.Struct("=IIIIQ")  # if, cookie[2], uid, inode
MSG_SIZE = MSG_HEAD.size + SOCKID.size + MSG_TAIL.size  # 64
FALLBACK = struct.Struct("=II")  # reason, peer_diagnosis
LINKINFO = struct.Struct("=B64sB40s40s")  # link_id, ibname, ibport, gid, peer_gid
LGRINFO_SIZE = LINKINFO.size + 1  # + role

STATES = {
    1: "ACTIVE",
    2: "INIT",
    7: "CLOSED",
    10: "LISTEN",
    20: "PEERCLOSEWAIT1",
    21: "PEERCLOSEWAIT2",
    22: "APPCLOSEWAIT1",
    23: "APPCLOSEWAIT2",
    24: "APPFINCLOSEWAIT1",
    25: "PEERFINCLOSEWAIT",
    26: "PEERABORTWAIT",
    27: "PROCESSABORT",
}

#: CLC decline / fallback reason codes (net/smc/smc_clc.h) in plain words.
REASONS = {
    0x01010000: "out of memory",
    0x02010000: "timeout waiting for CONFIRM LINK",
    0x02020000: "timeout waiting for ADD LINK",
    0x03000000: "configuration error",
    0x03010000: "peer did not indicate SMC",
    0x03020000: "IPsec in use",
    0x03030000: "no SMC device found (R or D)",
    0x03030001: "no SMC-D device found",
    0x03030002: "no SMC-R device found",
    0x03030003: "no ISMv2 device found",
    0x03030004: "peer has no SMCv2 extension",
    0x03030005: "peer has no SMC-Dv2 extension",
    0x03030006: "peer has no SEID",
    0x03030007: "no UEID match",
    0x03030008: "SMC release mismatch",
    0x03030009: "maximum connections per link group reached",
    0x0303000A: "maximum links per link group reached",
    0x0303000B: "SMC-Rv2 not usable",
    0x03040000: "SMC modes mismatch",
    0x03050000: "RMBE eyecatcher mismatch",
    0x03060000: "TCP fast open is not supported",
    0x03070000: "IP prefix / subnet mismatch",
    0x03080000: "VLAN id error",
    0x03090000: "ISM VLAN error",
    0x030A0000: "no active link",
    0x030B0000: "server link not found",
    0x030C0000: "SMC version mismatch",
    0x030D0000: "SMC-D DMB limit reached",
    0x030E0000: "SMC-Rv2 has no route to the peer",
    0x030F0000: "SMC-Rv2 indirect route mismatch",
    0x04000000: "synchronisation error",
    0x05000000: "peer declined",
}


def describe_reason(code: int) -> str:
    """Plain words for a fallback or peer-diagnosis code; negative errnos read as errors."""
    if code in REASONS:
        return REASONS[code]
    if code & 0xFFFF0000 == 0x09990000:
        return f"internal error 0x{code:08x}"
    if code >= 0x80000000:  # a negative errno stored in a u32
        errno_value = 0x100000000 - code
        return f"error {os.strerror(errno_value)} (errno {errno_value})"
    return f"unknown reason 0x{code:08x}"


@dataclass(frozen=True)
class LinkInfo:
    link_id: int
    ibname: str
    ibport: int
    gid: str
    peer_gid: str
    role: int


@dataclass(frozen=True)
class SmcSocket:
    """One SMC socket as smc_diag reports it."""

    state: int
    mode: int
    shutdown: int
    local: tuple[str, int]
    peer: tuple[str, int]
    ifindex: int
    uid: int
    inode: int
    fallback_reason: int = 0
    peer_diagnosis: int = 0
    link: LinkInfo | None = None

    @property
    def state_name(self) -> str:
        return STATES.get(self.state, f"STATE{self.state}")

    @property
    def mode_name(self) -> str:
        """smcss's Mode column: SMCR, SMCD, or TCP 0x<reason>[/0x<peer diagnosis>]."""
        if self.mode == MODE_SMCR:
            return "SMCR"
        if self.mode == MODE_SMCD:
            return "SMCD"
        text = f"TCP 0x{self.fallback_reason:08x}"
        return text + (f"/0x{self.peer_diagnosis:08x}" if self.peer_diagnosis else "")


def dump_request(ext: int = 1 << (SMC_DIAG_LGRINFO - 1), seq: int = 1) -> bytes:
    """The 52-byte smc_diag_req in a SOCK_DIAG_BY_FAMILY dump request."""
    body = REQUEST.pack(AF_SMC, ext, b"\0" * 48)
    return core.pack_message(SOCK_DIAG_BY_FAMILY, core.NLM_F_REQUEST | core.NLM_F_DUMP, body, seq)


def _address(words: bytes) -> str:
    """IPv4 when words 1..3 are zero (smc_diag reports AF_SMC, not the address family)."""
    if words[4:] == b"\0" * 12:
        return str(ipaddress.IPv4Address(words[:4]))
    return str(ipaddress.IPv6Address(words))


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def _link(raw: bytes) -> LinkInfo:
    if len(raw) < LGRINFO_SIZE:
        raise ValueError(f"SMC_DIAG_LGRINFO is {len(raw)} bytes, expected {LGRINFO_SIZE}")
    link_id, ibname, ibport, gid, peer_gid = LINKINFO.unpack_from(raw)
    return LinkInfo(link_id, _text(ibname), ibport, _text(gid), _text(peer_gid), raw[LINKINFO.size])


def decode_socket(payload: bytes) -> SmcSocket:
    """An SmcSocket from one reply payload: smc_diag_msg (64 bytes) then attributes."""
    if len(payload) < MSG_SIZE:
        raise ValueError(f"smc_diag_msg is {len(payload)} bytes, expected at least {MSG_SIZE}")
    family, state, mode, shutdown = MSG_HEAD.unpack_from(payload)
    if family != AF_SMC:
        raise ValueError(f"smc_diag_msg family {family}, expected {AF_SMC} (AF_SMC)")
    sport, dport, src, dst = SOCKID.unpack_from(payload, MSG_HEAD.size)
    ifindex, _c0, _c1, uid, inode = MSG_TAIL.unpack_from(payload, MSG_HEAD.size + SOCKID.size)
    attrs = core.attr_map(payload[MSG_SIZE:])
    reason = diagnosis = 0
    if SMC_DIAG_FALLBACK in attrs:
        reason, diagnosis = FALLBACK.unpack_from(attrs[SMC_DIAG_FALLBACK])
    if SMC_DIAG_SHUTDOWN in attrs:
        shutdown = attrs[SMC_DIAG_SHUTDOWN][0]
    link = _link(attrs[SMC_DIAG_LGRINFO]) if SMC_DIAG_LGRINFO in attrs else None
    return SmcSocket(
        state=state,
        mode=mode,
        shutdown=shutdown,
        local=(_address(src), sport),
        peer=(_address(dst), dport),
        ifindex=ifindex,
        uid=uid,
        inode=inode,
        fallback_reason=reason,
        peer_diagnosis=diagnosis,
        link=link,
    )


def encode_socket(sock: SmcSocket, seq: int = 1) -> bytes:
    """A reply message for `sock` in the kernel's layout (fixtures and the stand-in kernel)."""

    def words(address: str) -> bytes:
        packed = ipaddress.ip_address(address).packed
        return packed + b"\0" * (16 - len(packed))

    body = (
        MSG_HEAD.pack(AF_SMC, sock.state, sock.mode, sock.shutdown)
        + SOCKID.pack(sock.local[1], sock.peer[1], words(sock.local[0]), words(sock.peer[0]))
        + MSG_TAIL.pack(sock.ifindex, 0, 0, sock.uid, sock.inode)
        + core.pack_u8(SMC_DIAG_SHUTDOWN, sock.shutdown)
        + core.pack_attr(
            SMC_DIAG_FALLBACK, FALLBACK.pack(sock.fallback_reason, sock.peer_diagnosis)
        )
    )
    if sock.link is not None:
        link = sock.link
        body += core.pack_attr(
            SMC_DIAG_LGRINFO,
            LINKINFO.pack(
                link.link_id,
                link.ibname.encode(),
                link.ibport,
                link.gid.encode(),
                link.peer_gid.encode(),
            )
            + bytes([link.role]),
        )
    return core.pack_message(SOCK_DIAG_BY_FAMILY, core.NLM_F_MULTI, body, seq)


def list_sockets(transport: core.Transport) -> list[SmcSocket]:
    """Every SMC socket in the transport's network namespace."""
    replies = core.exchange(
        transport, dump_request(), "smc_diag dump (SOCK_DIAG_BY_FAMILY, AF_SMC)"
    )
    return [decode_socket(m.payload) for m in replies if m.type == SOCK_DIAG_BY_FAMILY]
