"""Codec for the `SMC_PNETID` generic netlink family (net/smc/smc_pnet.c, uapi linux/smc.h).

The pnet table pairs a PNETID with a netdev (ETHNAME) or an RDMA device port (IBNAME+IBPORT);
SMC-R uses it to find an RDMA device for a TCP connection's egress netdev.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from erdma.host.netlink import core

FAMILY_NAME = "SMC_PNETID"
FAMILY_VERSION = 1

CMD_GET = 1
CMD_ADD = 2
CMD_DEL = 3
CMD_FLUSH = 4

ATTR_NAME = 1
ATTR_ETHNAME = 2
ATTR_IBNAME = 3
ATTR_IBPORT = 4

NOT_APPLICABLE = "n/a"
NO_PORT = 0xFF


@dataclass(frozen=True)
class PnetEntry:
    """One pnet table row. ETH rows have no IB device (`ibname` None, `ibport` 255)."""

    pnetid: str
    ethname: str | None = None
    ibname: str | None = None
    ibport: int = NO_PORT

    def describe(self) -> str:
        """The row as `smc_pnet -s` prints it: PNETID ETHNAME IBNAME PORT."""
        return (
            f"{self.pnetid} {self.ethname or NOT_APPLICABLE} "
            f"{self.ibname or NOT_APPLICABLE} {self.ibport}"
        )


def _request(family_id: int, cmd: int, flags: int, attrs: list[bytes]) -> bytes:
    payload = core.genl_payload(cmd, attrs, FAMILY_VERSION)
    return core.pack_message(family_id, core.NLM_F_REQUEST | flags, payload)


def dump_request(family_id: int) -> bytes:
    return _request(family_id, CMD_GET, core.NLM_F_DUMP, [])


def add_request(family_id: int, entry: PnetEntry) -> bytes:
    """ADD for one entry: ETHNAME and/or IBNAME (+IBPORT, default 1 as smc_pnet does)."""
    attrs = [core.pack_str(ATTR_NAME, entry.pnetid)]
    if entry.ethname:
        attrs.append(core.pack_str(ATTR_ETHNAME, entry.ethname))
    if entry.ibname:
        attrs.append(core.pack_str(ATTR_IBNAME, entry.ibname))
        port = entry.ibport if entry.ibport != NO_PORT else 1
        attrs.append(core.pack_u8(ATTR_IBPORT, port))
    return _request(family_id, CMD_ADD, core.NLM_F_ACK, attrs)


def del_request(family_id: int, pnetid: str) -> bytes:
    return _request(family_id, CMD_DEL, core.NLM_F_ACK, [core.pack_str(ATTR_NAME, pnetid)])


def flush_request(family_id: int) -> bytes:
    return _request(family_id, CMD_FLUSH, core.NLM_F_ACK, [])


def encode_entry(family_id: int, entry: PnetEntry, seq: int = 1) -> bytes:
    """A dump reply message for `entry`, laid out as the kernel's smc_pnet_set_nla() does."""
    attrs = [
        core.pack_str(ATTR_NAME, entry.pnetid),
        core.pack_str(ATTR_ETHNAME, entry.ethname or NOT_APPLICABLE),
        core.pack_str(ATTR_IBNAME, entry.ibname or NOT_APPLICABLE),
        core.pack_u8(ATTR_IBPORT, entry.ibport),
    ]
    payload = core.genl_payload(CMD_GET, attrs, FAMILY_VERSION)
    return core.pack_message(family_id, core.NLM_F_MULTI, payload, seq)


def decode_entry(payload: bytes) -> PnetEntry:
    """A PnetEntry from one GET reply payload (genl header + attributes)."""
    _cmd, raw = core.split_genl(payload)
    attrs = core.attr_map(raw)
    if ATTR_NAME not in attrs:
        raise ValueError("SMC_PNETID reply without SMC_PNETID_NAME")
    eth = core.attr_str(attrs.get(ATTR_ETHNAME, b""))
    ib = core.attr_str(attrs.get(ATTR_IBNAME, b""))
    port = struct.unpack("=B", attrs[ATTR_IBPORT][:1])[0] if ATTR_IBPORT in attrs else NO_PORT
    return PnetEntry(
        pnetid=core.attr_str(attrs[ATTR_NAME]),
        ethname=eth if eth and eth != NOT_APPLICABLE else None,
        ibname=ib if ib and ib != NOT_APPLICABLE else None,
        ibport=port,
    )


def decode_request(payload: bytes) -> tuple[int, dict[int, bytes]]:
    """(cmd, attributes) of a request payload; the stand-in kernel uses it to answer."""
    cmd, raw = core.split_genl(payload)
    return cmd, core.attr_map(raw)


class PnetClient:
    """SMC_PNETID over a transport in one network namespace."""

    def __init__(self, transport: core.Transport) -> None:
        self._transport = transport
        self._family = core.resolve_family(transport, FAMILY_NAME)

    def dump(self) -> list[PnetEntry]:
        replies = core.exchange(self._transport, dump_request(self._family), "SMC_PNETID GET")
        return [decode_entry(m.payload) for m in replies if m.type == self._family]

    def add(self, entry: PnetEntry) -> None:
        core.exchange(
            self._transport, add_request(self._family, entry), f"SMC_PNETID ADD {entry.describe()}"
        )

    def delete(self, pnetid: str) -> None:
        core.exchange(
            self._transport, del_request(self._family, pnetid), f"SMC_PNETID DEL {pnetid}"
        )

    def flush(self) -> None:
        core.exchange(self._transport, flush_request(self._family), "SMC_PNETID FLUSH")
