"""SMC-R pnet table management: make sure the table pairs each device with its PNETID.

The pnet table is per network namespace: RDMA device ports (`erdma_0` port 1) get their PNETID
in the initial namespace, a pod's `eth0` gets the same PNETID in the pod's namespace; SMC-R
then finds the device for the pod's connections. Changes are idempotent: dump the table, add
only what is missing, matching whole fields (a row for `eth01` is not a row for `eth0`).

Netlink (`SMC_PNETID`) is used first; the `smc_pnet` command through a Runner is the fallback.
"""

from __future__ import annotations

import errno
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from erdma.host.netlink import core
from erdma.host.netlink.smc_pnet import NO_PORT, PnetClient, PnetEntry
from erdma.host.netns import in_netns
from erdma.host.run import Runner

log = logging.getLogger(__name__)
T = TypeVar("T")

PNETID_PATTERN = re.compile(r"^[A-Za-z0-9]{1,16}$")
MODULE_HINT = "load it with `modprobe smc` (with MLNX OFED, its smc.ko replaces the in-box module)"


class SmcUnavailable(RuntimeError):
    """The kernel has no SMC: module not loaded, or built without it."""


class PnetError(RuntimeError):
    """The pnet table refused a change, or holds a conflicting row."""


def smc_loaded(root: Path = Path("/")) -> bool:
    """Whether the smc module is loaded, from `<root>/sys/module/smc`."""
    return (root / "sys/module/smc").is_dir()


def normalize_pnetid(value: str) -> str:
    """The PNETID as the kernel stores it (stripped, upper-case); ValueError names the rule."""
    text = value.strip()
    if not PNETID_PATTERN.match(text):
        raise ValueError(
            f"invalid PNETID {value!r}: expected 1-16 letters or digits, e.g. 00163E2F3775"
        )
    return text.upper()


class PnetBackend(Protocol):
    """One network namespace's pnet table."""

    async def dump(self) -> list[PnetEntry]: ...

    async def add(self, entry: PnetEntry) -> None: ...


class NetlinkPnet:
    """The table through `SMC_PNETID` generic netlink, inside the namespace at `netns`."""

    def __init__(
        self,
        netns: str | None = None,
        transport_factory: Callable[[], core.Transport] | None = None,
    ) -> None:
        self.netns = netns
        self._factory = transport_factory or (lambda: core.NetlinkSocket(core.NETLINK_GENERIC))

    def _call(self, op: Callable[[PnetClient], T]) -> T:
        try:
            with core.opened(self._factory) as transport:
                return op(PnetClient(transport))
        except core.FamilyNotFound as exc:
            raise SmcUnavailable(f"SMC is not available: {exc}; {MODULE_HINT}") from exc
        except core.NetlinkError as exc:
            if exc.code == errno.EEXIST:
                raise FileExistsError(exc.code, str(exc)) from exc
            raise

    async def dump(self) -> list[PnetEntry]:
        return await in_netns(self.netns, lambda: self._call(lambda c: c.dump()))

    async def add(self, entry: PnetEntry) -> None:
        await in_netns(self.netns, lambda: self._call(lambda c: c.add(entry)))


class CommandPnet:
    """The table through smc-tools' `smc_pnet`, entering `netns` with nsenter when given."""

    def __init__(self, runner: Runner, netns: str | None = None, command: str = "smc_pnet") -> None:
        self.runner = runner
        self.netns = netns
        self.command = command

    def _argv(self, *args: str) -> list[str]:
        prefix = ["nsenter", f"--net={self.netns}", "--"] if self.netns else []
        return [*prefix, self.command, *args]

    async def _run(self, *args: str) -> str:
        result = await self.runner.run(self._argv(*args))
        said = result.stdout + result.stderr
        if result.returncode == 127:
            raise SmcUnavailable(f"`{self.command}` is not installed: {result.describe()}")
        if "SMC module not loaded" in said:
            raise SmcUnavailable(f"SMC is not available: {result.describe()}; {MODULE_HINT}")
        if not result.ok and "exist" in said.lower():
            raise FileExistsError(errno.EEXIST, result.describe())
        if not result.ok:
            raise PnetError(result.describe())
        return result.stdout

    async def dump(self) -> list[PnetEntry]:
        return parse_show(await self._run("-s"))

    async def add(self, entry: PnetEntry) -> None:
        args = ["-a", entry.pnetid]
        if entry.ethname:
            args += ["-I", entry.ethname]
        if entry.ibname:
            args += ["-D", entry.ibname, "-P", str(entry.ibport if entry.ibport != NO_PORT else 1)]
        await self._run(*args)


def parse_show(text: str) -> list[PnetEntry]:
    """Rows of `smc_pnet -s` output (`PNETID ETHNAME IBNAME PORT`), whole fields only."""
    rows = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 4 or not fields[3].isdigit():
            continue
        pnetid, eth, ib, port = fields
        rows.append(
            PnetEntry(
                pnetid=pnetid,
                ethname=None if eth == "n/a" else eth,
                ibname=None if ib == "n/a" else ib,
                ibport=int(port),
            )
        )
    return rows


class FallbackPnet:
    """Netlink first; the command when netlink cannot be used. SMC missing is reported once.

    The backend that answered the dump also makes the changes, so one table is never written
    through two paths.
    """

    def __init__(self, primary: PnetBackend, fallback: PnetBackend) -> None:
        self.primary = primary
        self.fallback = fallback
        self._active = primary

    async def dump(self) -> list[PnetEntry]:
        try:
            rows = await self.primary.dump()
        except (SmcUnavailable, OSError) as first:
            log.info("pnet netlink dump failed (%s); trying the smc_pnet command", first)
            try:
                rows = await self.fallback.dump()
            except SmcUnavailable as second:
                raise SmcUnavailable(f"{first}; {second}") from second
            self._active = self.fallback
            return rows
        self._active = self.primary
        return rows

    async def add(self, entry: PnetEntry) -> None:
        await self._active.add(entry)


def default_backend(runner: Runner, netns: str | None = None) -> PnetBackend:
    """Netlink in `netns`, falling back to `smc_pnet` run through `runner`."""
    return FallbackPnet(NetlinkPnet(netns), CommandPnet(runner, netns))


@dataclass
class PnetReport:
    """What `ensure_entries` found and did."""

    added: list[PnetEntry] = field(default_factory=list)
    present: list[PnetEntry] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)

    def describe(self) -> str:
        parts = [f"added {len(self.added)}", f"already present {len(self.present)}"]
        return ", ".join(parts) + "".join(f"; conflict: {c}" for c in self.conflicts)


def _same_slot(row: PnetEntry, wanted: PnetEntry) -> bool:
    """Whether `row` occupies the netdev or device port that `wanted` would take."""
    if wanted.ethname:
        return row.ethname == wanted.ethname
    port = wanted.ibport if wanted.ibport != NO_PORT else 1
    return row.ibname == wanted.ibname and row.ibport == port


async def ensure_entries(backend: PnetBackend, wanted: Sequence[PnetEntry]) -> PnetReport:
    """Add each wanted row that is missing; a slot held under another PNETID is a conflict."""
    report = PnetReport()
    table = await backend.dump()
    for entry in wanted:
        entry = PnetEntry(normalize_pnetid(entry.pnetid), entry.ethname, entry.ibname, entry.ibport)
        holder = next((row for row in table if _same_slot(row, entry)), None)
        if holder is not None and holder.pnetid == entry.pnetid:
            report.present.append(entry)
            continue
        if holder is not None:
            report.conflicts.append(f"wanted `{entry.describe()}`, table has `{holder.describe()}`")
            continue
        try:
            await backend.add(entry)
        except FileExistsError:
            report.conflicts.append(
                f"kernel refused `{entry.describe()}` (EEXIST): the port or netdev already has "
                "a PNETID, set in hardware or by another writer"
            )
            continue
        table.append(entry)
        report.added.append(entry)
    return report


class NamedDevice(Protocol):
    """What host pnet setup needs of a discovered device."""

    @property
    def name(self) -> str: ...

    @property
    def pnetid(self) -> str | None: ...


async def ensure_host_pnet(
    backend: PnetBackend, devices: Sequence[NamedDevice], root: Path = Path("/")
) -> PnetReport:
    """Give port 1 of each device its PNETID in the initial namespace's table.

    A device without a PNETID is skipped with a log line; SMC missing raises SmcUnavailable.
    """
    if not smc_loaded(root):
        raise SmcUnavailable(
            f"SMC is not available on this host: {root / 'sys/module/smc'} is absent; {MODULE_HINT}"
        )
    wanted = []
    for device in devices:
        if not device.pnetid:
            log.warning("device %s has no PNETID; SMC-R cannot use it from pods", device.name)
            continue
        wanted.append(PnetEntry(pnetid=device.pnetid, ibname=device.name, ibport=1))
    report = await ensure_entries(backend, wanted)
    log.info("host pnet table: %s", report.describe())
    return report
