"""A stand-in for the kernel's SMC interfaces, for hosts whose kernel has no SMC.

It answers the real byte protocol (nlctrl family lookup, `SMC_PNETID`, smc_diag dumps) and the
`smc_pnet` command line, and keeps one pnet table per network namespace, keyed by the namespace
of the thread that talks to it, so code that enters a pod's namespace meets that pod's table.
The rules are those of net/smc/smc_pnet.c: PNETIDs are stripped, checked (1-16 letters or
digits) and upper-cased; ADD answers EEXIST when nothing new was added; RDMA device entries are
honoured only in the initial namespace and live on the device port, visible to every namespace's
SMC-R but dumped only from the initial namespace.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from erdma.host.netlink import core, smc_diag, smc_pnet
from erdma.host.netlink.smc_pnet import PnetEntry
from erdma.host.netns import netns_id
from erdma.host.run import Result

PNETID_FAMILY_ID = 0x1F
COMMANDS = {
    smc_pnet.CMD_GET: "GET",
    smc_pnet.CMD_ADD: "ADD",
    smc_pnet.CMD_DEL: "DEL",
    smc_pnet.CMD_FLUSH: "FLUSH",
}


class KernelError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(os.strerror(code))
        self.code = code


def _valid_pnetid(raw: str) -> str:
    text = raw.strip()
    if not 1 <= len(text) <= 16 or not text.isascii() or not text.isalnum():
        raise KernelError(errno.EINVAL)
    return text.upper()


@dataclass
class FakeSmcKernel:
    """SMC pnet tables and sockets of a simulated kernel (see the module docstring)."""

    ib_devices: Iterable[str] = ("erdma_0",)
    hardware_pnetids: Mapping[str, str] = field(default_factory=dict)
    smc_loaded: bool = True
    diag_loaded: bool = True
    init_netns: int = field(default_factory=lambda: netns_id("/proc/self/ns/net"))
    tables: dict[int, list[PnetEntry]] = field(default_factory=dict)
    port_pnetids: dict[tuple[str, int], str] = field(default_factory=dict)
    sockets: dict[int, list[smc_diag.SmcSocket]] = field(default_factory=dict)
    requests: list[tuple[int, str]] = field(default_factory=list)

    # --- kernel rules -------------------------------------------------------------------------

    def table(self, ns: int) -> list[PnetEntry]:
        return self.tables.setdefault(ns, [])

    def add(self, ns: int, pnetid: str, eth: str | None, ib: str | None, port: int) -> None:
        """smc_pnet_enter(): raises KernelError like the kernel's return codes."""
        name = _valid_pnetid(pnetid)
        added = False
        if eth:
            taken = eth in self.hardware_pnetids or any(r.ethname == eth for r in self.table(ns))
            if not taken:
                self.table(ns).append(PnetEntry(name, ethname=eth))
                added = True
        if ns == self.init_netns and ib:
            if not 1 <= port <= 2:
                raise KernelError(errno.EINVAL)
            slot = (ib.strip(), port)
            if slot[0] in set(self.ib_devices) and slot not in self.port_pnetids:
                self.port_pnetids[slot] = name
                self.table(ns).append(PnetEntry(name, ibname=slot[0], ibport=port))
                added = True
        if not added:
            raise KernelError(errno.EEXIST)

    def delete(self, ns: int, pnetid: str | None) -> None:
        """DEL (one PNETID) or FLUSH (None); ENOENT when nothing matched."""
        name = None if pnetid is None else _valid_pnetid(pnetid)
        rows = self.table(ns)
        keep = [r for r in rows if name is not None and r.pnetid != name]
        if len(keep) == len(rows):
            raise KernelError(errno.ENOENT)
        self.tables[ns] = keep
        if ns == self.init_netns:
            self.port_pnetids = {
                slot: pid
                for slot, pid in self.port_pnetids.items()
                if name is not None and pid != name
            }

    def dump(self, ns: int) -> list[PnetEntry]:
        rows = self.table(ns)
        return list(rows) if ns == self.init_netns else [r for r in rows if r.ibname is None]

    # --- byte protocol --------------------------------------------------------------------------

    def genl_transport(self) -> core.Transport:
        """A NETLINK_GENERIC transport answering in the calling thread's namespace."""
        return _Transport(self._answer_genl)

    def diag_transport(self) -> core.Transport:
        """A NETLINK_SOCK_DIAG transport answering in the calling thread's namespace."""
        return _Transport(self._answer_diag)

    def _answer_genl(self, request: bytes) -> bytes:
        (msg,) = core.parse_messages(request)
        ns = netns_id()
        try:
            if msg.type == core.GENL_ID_CTRL:
                return self._family_reply(msg.payload)
            if msg.type != PNETID_FAMILY_ID or not self.smc_loaded:
                raise KernelError(errno.ENOENT)
            cmd, attrs = smc_pnet.decode_request(msg.payload)
            if cmd not in COMMANDS:
                raise KernelError(errno.EOPNOTSUPP)
            self.requests.append((ns, COMMANDS[cmd]))
            if cmd == smc_pnet.CMD_GET:
                rows = [smc_pnet.encode_entry(PNETID_FAMILY_ID, r) for r in self.dump(ns)]
                return b"".join(rows) + core.done_message()
            text = {k: core.attr_str(v) for k, v in attrs.items() if k != smc_pnet.ATTR_IBPORT}
            if cmd == smc_pnet.CMD_ADD:
                port = attrs.get(smc_pnet.ATTR_IBPORT, b"\x01")[0]
                self.add(
                    ns,
                    text.get(smc_pnet.ATTR_NAME, ""),
                    text.get(smc_pnet.ATTR_ETHNAME),
                    text.get(smc_pnet.ATTR_IBNAME),
                    port,
                )
            else:
                name = text.get(smc_pnet.ATTR_NAME) if cmd == smc_pnet.CMD_DEL else None
                self.delete(ns, name)
        except KernelError as exc:
            return core.error_message(exc.code, request)
        return core.error_message(0, request)

    def _family_reply(self, payload: bytes) -> bytes:
        _cmd, attrs = core.split_genl(payload)
        name = core.attr_str(core.attr_map(attrs).get(core.CTRL_ATTR_FAMILY_NAME, b""))
        if name != smc_pnet.FAMILY_NAME or not self.smc_loaded:
            raise KernelError(errno.ENOENT)
        body = core.genl_payload(
            core.CTRL_CMD_NEWFAMILY,
            [
                core.pack_str(core.CTRL_ATTR_FAMILY_NAME, name),
                core.pack_attr(core.CTRL_ATTR_FAMILY_ID, struct.pack("=H", PNETID_FAMILY_ID)),
            ],
        )
        return core.pack_message(core.GENL_ID_CTRL, 0, body)

    def _answer_diag(self, request: bytes) -> bytes:
        (msg,) = core.parse_messages(request)
        if not self.diag_loaded or msg.payload[0] != smc_diag.AF_SMC:
            return core.error_message(errno.ENOENT, request)
        own = self.sockets.get(netns_id(), [])
        return b"".join(smc_diag.encode_socket(s) for s in own) + core.done_message()

    # --- smc_pnet command -------------------------------------------------------------------------

    def smc_pnet(self, argv: tuple[str, ...]) -> Result | None:
        """A RecordingRunner handler for `[nsenter --net=PATH --] smc_pnet ...`."""
        ns = self.init_netns
        args = list(argv)
        if len(args) > 2 and args[0] == "nsenter" and args[1].startswith("--net="):
            ns = netns_id(args[1].removeprefix("--net="))
            args = args[args.index("--") + 1 :]
        if not args or os.path.basename(args[0]) != "smc_pnet":
            return None
        if not self.smc_loaded:
            return Result(argv, 1, "", "SMC module not loaded\n")
        opts = dict(zip(args[1::2], args[2::2], strict=False))
        try:
            if "-a" in opts:
                port = int(opts.get("-P", "1"))
                self.add(ns, opts["-a"], opts.get("-I"), opts.get("-D"), port)
            elif "-d" in opts:
                self.delete(ns, opts["-d"])
            elif "-f" in args:
                with contextlib.suppress(KernelError):  # smc_pnet masks flushing an empty table
                    self.delete(ns, None)
            else:
                lines = [row.describe() for row in self.dump(ns)]
                return Result(argv, 0, "".join(line + "\n" for line in lines))
        except KernelError as exc:
            return Result(argv, 1, "", f"Error: {exc}\n")
        return Result(argv, 0)


class _Transport:
    def __init__(self, answer: Callable[[bytes], bytes]) -> None:
        self._answer = answer

    def exchange(self, request: bytes) -> bytes:
        try:
            return self._answer(request)
        except KernelError as exc:
            return core.error_message(exc.code, request)
