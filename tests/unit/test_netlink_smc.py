"""SMC netlink codecs against byte fixtures laid out by hand from the kernel uapi headers."""

from __future__ import annotations

import errno
import socket
import struct
from pathlib import Path

import pytest

from erdma.host.netlink import core, smc_diag, smc_pnet
from erdma.host.netlink.smc_pnet import PnetEntry


def nlmsg(msg_type: int, flags: int, payload: bytes, seq: int = 1) -> bytes:
    return struct.pack("=IHHII", 16 + len(payload), msg_type, flags, seq, 0) + payload


def rta(attr_type: int, value: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(value), attr_type) + value
    return raw + b"\0" * (-len(raw) % 4)


def ipv4_words(a: str) -> bytes:
    return socket.inet_aton(a) + b"\0" * 12


def diag_msg(state: int, mode: int, src: bytes, dst: bytes, sport: int, dport: int) -> bytes:
    """struct smc_diag_msg: 4 u8, inet_diag_sockid (48 bytes), uid u32, inode u64."""
    sockid = struct.pack(">HH", sport, dport) + src + dst + struct.pack("=III", 2, 7, 0)
    return struct.pack("=BBBB", 43, state, mode, 0) + sockid + struct.pack("=IQ", 1000, 4242)


class Replay:
    """A transport that answers every request with one recorded reply."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.sent: list[bytes] = []

    def exchange(self, request: bytes) -> bytes:
        self.sent.append(request)
        return self.reply


# --- smc_diag ----------------------------------------------------------------------------------


def test_diag_request_is_the_52_byte_smc_diag_req_in_a_dump():
    expected = struct.pack("=IHHII", 68, 20, 0x301, 1, 0) + bytes([43, 0, 0, 2]) + b"\0" * 48
    assert smc_diag.dump_request() == expected


def test_fallback_socket_decodes_addresses_reason_and_smcss_mode():
    record = diag_msg(1, 1, ipv4_words("10.0.0.5"), ipv4_words("10.0.0.6"), 8080, 41000)
    assert len(record) == 64
    attrs = rta(3, b"\x00") + rta(5, struct.pack("=II", 0x03030002, 0))
    reply = nlmsg(20, core.NLM_F_MULTI, record + attrs) + nlmsg(core.NLMSG_DONE, 2, b"\0" * 4)

    (sock,) = smc_diag.list_sockets(Replay(reply))

    assert sock.state_name == "ACTIVE"
    assert sock.local == ("10.0.0.5", 8080)
    assert sock.peer == ("10.0.0.6", 41000)
    assert (sock.uid, sock.inode, sock.ifindex) == (1000, 4242, 2)
    assert sock.mode_name == "TCP 0x03030002"
    assert smc_diag.describe_reason(sock.fallback_reason) == "no SMC-R device found"


def test_smcr_socket_carries_link_group_device():
    record = diag_msg(1, 0, ipv4_words("10.0.0.5"), ipv4_words("10.0.0.6"), 5201, 50000)
    lgr = struct.pack("=B64sB40s40s", 1, b"erdma_0", 1, b"fe80::1", b"fe80::2") + b"\x01"
    assert len(lgr) == 147
    attrs = rta(3, b"\x00") + rta(5, struct.pack("=II", 0, 0)) + rta(2, lgr)

    sock = smc_diag.decode_socket(record + attrs)

    assert sock.mode_name == "SMCR"
    assert sock.link is not None
    assert (sock.link.ibname, sock.link.ibport, sock.link.role) == ("erdma_0", 1, 1)


def test_peer_diagnosis_is_shown_after_the_reason():
    record = diag_msg(1, 1, ipv4_words("10.0.0.5"), ipv4_words("10.0.0.6"), 1, 2)
    sock = smc_diag.decode_socket(record + rta(5, struct.pack("=II", 0x03010000, 0x03030002)))
    assert sock.mode_name == "TCP 0x03010000/0x03030002"


def test_ipv6_addresses_use_all_four_words():
    src = socket.inet_pton(socket.AF_INET6, "fd00::5")
    sock = smc_diag.decode_socket(diag_msg(10, 1, src, b"\0" * 16, 80, 0))
    assert sock.local == ("fd00::5", 80)
    assert sock.state_name == "LISTEN"


def test_encoder_matches_the_hand_built_layout():
    record = diag_msg(1, 1, ipv4_words("10.0.0.5"), ipv4_words("10.0.0.6"), 8080, 41000)
    decoded = smc_diag.decode_socket(record + rta(5, struct.pack("=II", 0x03070000, 0)))
    (again,) = core.parse_messages(smc_diag.encode_socket(decoded))
    assert smc_diag.decode_socket(again.payload) == decoded


@pytest.mark.parametrize(
    ("payload", "complaint"),
    [
        (b"\x2b" * 10, "expected at least 64"),
        (bytes([2]) + b"\0" * 63, "family 2"),
        (diag_msg(1, 0, b"\0" * 16, b"\0" * 16, 0, 0) + rta(2, b"x" * 20), "LGRINFO is 20 bytes"),
        (diag_msg(1, 0, b"\0" * 16, b"\0" * 16, 0, 0) + struct.pack("=HH", 40, 5), "truncated"),
    ],
)
def test_malformed_replies_are_rejected_with_the_reason(payload, complaint):
    with pytest.raises(ValueError, match=complaint):
        smc_diag.decode_socket(payload)


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (0x03010000, "peer did not indicate SMC"),
        (0x03070000, "IP prefix / subnet mismatch"),
        (0x09990001, "internal error 0x09990001"),
        (0x100000000 - errno.ETIMEDOUT, f"errno {errno.ETIMEDOUT}"),
        (0x03990000, "unknown reason 0x03990000"),
    ],
)
def test_reason_codes_read_as_plain_words(code, words):
    assert words in smc_diag.describe_reason(code)


def test_kernel_error_reply_raises_with_errno():
    reply = nlmsg(core.NLMSG_ERROR, 0, struct.pack("=i", -errno.ENOENT) + b"\0" * 16)
    with pytest.raises(core.NetlinkError) as info:
        smc_diag.list_sockets(Replay(reply))
    assert info.value.code == errno.ENOENT


# --- SMC_PNETID ----------------------------------------------------------------------------------


def test_add_eth_request_layout():
    genl = bytes([2, 1, 0, 0])
    attrs = rta(1, b"00163E2F3775\0") + rta(2, b"eth0\0")
    expected = nlmsg(0x1F, core.NLM_F_REQUEST | core.NLM_F_ACK, genl + attrs)
    assert smc_pnet.add_request(0x1F, PnetEntry("00163E2F3775", ethname="eth0")) == expected


def test_add_ib_request_defaults_to_port_1():
    raw = smc_pnet.add_request(0x1F, PnetEntry("ABC", ibname="erdma_0"))
    (msg,) = core.parse_messages(raw)
    cmd, attrs = smc_pnet.decode_request(msg.payload)
    assert cmd == smc_pnet.CMD_ADD
    assert attrs[smc_pnet.ATTR_IBNAME] == b"erdma_0\0"
    assert attrs[smc_pnet.ATTR_IBPORT] == b"\x01"
    assert smc_pnet.ATTR_ETHNAME not in attrs


def test_dump_reply_rows_decode_with_na_as_absent():
    genl = bytes([1, 1, 0, 0])
    eth = genl + rta(1, b"ABC\0") + rta(2, b"encf500\0") + rta(3, b"n/a\0") + rta(4, b"\xff")
    ib = genl + rta(1, b"ABC\0") + rta(2, b"n/a\0") + rta(3, b"0001:00:00.0\0") + rta(4, b"\x02")
    reply = nlmsg(0x1F, 2, eth) + nlmsg(0x1F, 2, ib) + nlmsg(core.NLMSG_DONE, 2, b"\0" * 4)
    family = nlmsg(0x10, 0, bytes([1, 2, 0, 0]) + rta(1, struct.pack("=H", 0x1F)))

    class Kernel:
        def exchange(self, request: bytes) -> bytes:
            return family if core.parse_messages(request)[0].type == 0x10 else reply

    rows = smc_pnet.PnetClient(Kernel()).dump()

    assert rows == [
        PnetEntry("ABC", ethname="encf500"),
        PnetEntry("ABC", ibname="0001:00:00.0", ibport=2),
    ]
    assert [r.describe() for r in rows] == ["ABC encf500 n/a 255", "ABC n/a 0001:00:00.0 2"]


def test_missing_family_is_reported_by_name():
    refusal = nlmsg(core.NLMSG_ERROR, 0, struct.pack("=i", -errno.ENOENT) + b"\0" * 16)
    with pytest.raises(core.FamilyNotFound, match="'SMC_PNETID' is not registered"):
        smc_pnet.PnetClient(Replay(refusal))


def test_real_kernel_resolves_nlctrl_itself():
    with core.NetlinkSocket(core.NETLINK_GENERIC) as sock:
        assert core.resolve_family(sock, "nlctrl") == core.GENL_ID_CTRL


@pytest.mark.skipif(Path("/sys/module/smc").exists(), reason="this kernel has SMC loaded")
def test_real_kernel_without_smc_has_no_pnet_family():
    with core.NetlinkSocket(core.NETLINK_GENERIC) as sock, pytest.raises(core.FamilyNotFound):
        smc_pnet.PnetClient(sock)
