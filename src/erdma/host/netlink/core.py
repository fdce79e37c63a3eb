"""Netlink framing: nlmsghdr, nlattr, genlmsghdr, error replies, generic netlink family lookup.

Layouts follow include/uapi/linux/netlink.h and genetlink.h (native byte order, 4-byte
alignment). A `Transport` carries one request and returns every reply byte up to the end of the
answer; the real one is a netlink socket opened in the caller's network namespace.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

NLMSG_HDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
NLA_HDR = struct.Struct("=HH")  # len, type
GENL_HDR = struct.Struct("=BBH")  # cmd, version, reserved

NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
NLA_TYPE_MASK = 0x3FFF  # strips NLA_F_NESTED and NLA_F_NET_BYTEORDER

NETLINK_SOCK_DIAG = 4
NETLINK_GENERIC = 16

GENL_ID_CTRL = 0x10
CTRL_CMD_NEWFAMILY = 1
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2


class NetlinkError(OSError):
    """The kernel answered a request with a negative error code."""

    def __init__(self, code: int, what: str) -> None:
        super().__init__(code, os.strerror(code))
        self.code = code
        self.what = what

    def __str__(self) -> str:
        return f"{self.what}: {os.strerror(self.code)} (errno {self.code})"


class FamilyNotFound(LookupError):
    """A generic netlink family is not registered (its kernel module is not loaded)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"generic netlink family {name!r} is not registered in this kernel")
        self.name = name


@dataclass(frozen=True)
class Message:
    """One decoded netlink message: header fields plus the payload after the header."""

    type: int
    flags: int
    seq: int
    pid: int
    payload: bytes


class Transport(Protocol):
    """Carries one netlink request; returns the raw replies (through DONE or the ack/error)."""

    def exchange(self, request: bytes) -> bytes: ...


@contextmanager
def opened(factory: Callable[[], Transport]) -> Iterator[Transport]:
    """A transport from `factory`, closed afterwards when it has a `close` (sockets do)."""
    transport = factory()
    try:
        yield transport
    finally:
        close = getattr(transport, "close", None)
        if callable(close):
            close()


def align(length: int) -> int:
    return (length + 3) & ~3


def pack_message(msg_type: int, flags: int, payload: bytes, seq: int = 1) -> bytes:
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(payload), msg_type, flags, seq, 0) + payload


def parse_messages(data: bytes) -> list[Message]:
    """Split a receive buffer into messages; a length that overruns the buffer is an error."""
    out = []
    offset = 0
    while offset + NLMSG_HDR.size <= len(data):
        length, msg_type, flags, seq, pid = NLMSG_HDR.unpack_from(data, offset)
        if length < NLMSG_HDR.size or offset + length > len(data):
            raise ValueError(f"truncated netlink message at offset {offset} (length {length})")
        out.append(
            Message(msg_type, flags, seq, pid, data[offset + NLMSG_HDR.size : offset + length])
        )
        offset += align(length)
    return out


def pack_attr(attr_type: int, value: bytes) -> bytes:
    raw = NLA_HDR.pack(NLA_HDR.size + len(value), attr_type) + value
    return raw + b"\0" * (align(len(raw)) - len(raw))


def pack_str(attr_type: int, value: str) -> bytes:
    return pack_attr(attr_type, value.encode() + b"\0")


def pack_u8(attr_type: int, value: int) -> bytes:
    return pack_attr(attr_type, struct.pack("=B", value))


def iter_attrs(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(type, value) pairs of a packed attribute list, flags stripped from the type."""
    offset = 0
    while offset + NLA_HDR.size <= len(data):
        length, attr_type = NLA_HDR.unpack_from(data, offset)
        if length < NLA_HDR.size or offset + length > len(data):
            raise ValueError(f"truncated netlink attribute at offset {offset} (length {length})")
        yield attr_type & NLA_TYPE_MASK, data[offset + NLA_HDR.size : offset + length]
        offset += align(length)


def attr_map(data: bytes) -> dict[int, bytes]:
    return dict(iter_attrs(data))


def attr_str(value: bytes) -> str:
    return value.split(b"\0", 1)[0].decode(errors="replace")


def genl_payload(cmd: int, attrs: Iterable[bytes], version: int = 1) -> bytes:
    return GENL_HDR.pack(cmd, version, 0) + b"".join(attrs)


def split_genl(payload: bytes) -> tuple[int, bytes]:
    """(cmd, attribute bytes) of a generic netlink payload."""
    cmd, _version, _reserved = GENL_HDR.unpack_from(payload)
    return cmd, payload[GENL_HDR.size :]


def error_message(code: int, request: bytes, seq: int = 1) -> bytes:
    """An NLMSG_ERROR reply (code 0 is an ack) quoting the request header, as the kernel does."""
    return pack_message(NLMSG_ERROR, 0, struct.pack("=i", -code) + request[: NLMSG_HDR.size], seq)


def done_message(seq: int = 1) -> bytes:
    return pack_message(NLMSG_DONE, NLM_F_MULTI, struct.pack("=i", 0), seq)


def exchange(transport: Transport, request: bytes, what: str) -> list[Message]:
    """Send `request`; return its data messages. A negative error raises NetlinkError."""
    out = []
    for msg in parse_messages(transport.exchange(request)):
        if msg.type == NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", msg.payload)
            if code < 0:
                raise NetlinkError(-code, what)
        elif msg.type != NLMSG_DONE:
            out.append(msg)
    return out


def resolve_family(transport: Transport, name: str) -> int:
    """The numeric id of a generic netlink family, asked of nlctrl."""
    request = pack_message(
        GENL_ID_CTRL,
        NLM_F_REQUEST,
        genl_payload(CTRL_CMD_GETFAMILY, [pack_str(CTRL_ATTR_FAMILY_NAME, name)]),
    )
    try:
        replies = exchange(transport, request, f"resolve generic netlink family {name!r}")
    except NetlinkError as exc:
        if exc.code == errno.ENOENT:
            raise FamilyNotFound(name) from exc
        raise
    for msg in replies:
        _cmd, attrs = split_genl(msg.payload)
        family_id = attr_map(attrs).get(CTRL_ATTR_FAMILY_ID)
        if family_id is not None:
            return int(struct.unpack("=H", family_id[:2])[0])
    raise FamilyNotFound(name)


class NetlinkSocket:
    """A real netlink socket in the calling thread's network namespace.

    Create it inside the namespace that should answer (see `erdma.host.netns`): the kernel binds
    a netlink socket to the namespace of the task that opened it.
    """

    def __init__(self, protocol: int, timeout: float = 5.0) -> None:
        self._sock = socket.socket(
            socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, protocol
        )
        self._sock.settimeout(timeout)
        self._sock.bind((0, 0))

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> NetlinkSocket:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def exchange(self, request: bytes) -> bytes:
        _len, _type, flags, _seq, _pid = NLMSG_HDR.unpack_from(request)
        self._sock.send(request)
        chunks = []
        while True:
            data = self._sock.recv(1 << 16)
            chunks.append(data)
            msgs = parse_messages(data)
            if any(m.type in (NLMSG_DONE, NLMSG_ERROR) for m in msgs):
                break
            if not flags & NLM_F_DUMP and not any(m.flags & NLM_F_MULTI for m in msgs):
                break
        return b"".join(chunks)
