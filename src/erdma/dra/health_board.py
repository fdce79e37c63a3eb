"""The device health the DRA driver reports to kubelet, and the streams waiting for it.

Every rescan the driver hands the board its device list (the same verdicts its ResourceSlice
taints come from) and the devices its prepared claims hold. The board keeps one report per
device: Healthy or Unhealthy as decided, Unknown for a device a claim still holds that the
node no longer publishes (gone from the host, or no longer exposed: nothing can be said).
A stream gets the full list at once, again on every change, and again every `resend` seconds
while rescans keep confirming it: kubelet turns a device Unknown when it hears nothing for
its timeout, and a stalled agent should decay to Unknown exactly that way instead of being
vouched for by a timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import AsyncGenerator, Iterable, Mapping
from dataclasses import dataclass

from erdma.dra.checkpoint import ClaimRecord
from erdma.dra.devices import DraDevice

#: seconds between resends of an unchanged list; kubelet's default timeout is 30 s
RESEND_SECONDS = 10.0
#: what each report asks kubelet to wait before it calls a silent device Unknown
TIMEOUT_SECONDS = 30
GONE = "no longer published by this node; a prepared claim still holds it"


class Status(enum.Enum):
    """DRAResourceHealth's HealthStatus: the names and numbers of its enum on the wire."""

    UNKNOWN = 0
    HEALTHY = 1
    UNHEALTHY = 2


@dataclass(frozen=True)
class DeviceReport:
    """One device as kubelet hears of it: pool and device name as in the ResourceSlice."""

    pool: str
    device: str
    status: Status
    message: str


@dataclass(frozen=True)
class Report:
    """The full list at one moment; `determined` is the Unix time of the rescan behind it."""

    devices: tuple[DeviceReport, ...]
    determined: float


class HealthBoard:
    """The latest full health list of one pool, and a wake-up for every stream on a change."""

    def __init__(self, pool: str, resend: float = RESEND_SECONDS) -> None:
        self.pool = pool
        self.resend = resend
        self._devices: tuple[DeviceReport, ...] | None = None  # None until the first rescan
        self._determined = 0.0
        self._changed = asyncio.Event()

    def update(self, devices: Mapping[str, DraDevice], claims: Iterable[ClaimRecord]) -> None:
        """Adopt a rescan's verdicts; wakes the streams only when a report changed."""
        reports = [
            DeviceReport(
                self.pool,
                name,
                Status.HEALTHY if device.healthy else Status.UNHEALTHY,
                device.health.message,
            )
            for name, device in devices.items()
        ]
        held = {d.device_name for r in claims for d in r.devices if d.pool_name == self.pool}
        reports += [DeviceReport(self.pool, n, Status.UNKNOWN, GONE) for n in held - set(devices)]
        now = tuple(sorted(reports, key=lambda r: r.device))
        self._determined = time.time()
        if now != self._devices:
            self._devices = now
            self._changed.set()
            self._changed = asyncio.Event()

    @property
    def current(self) -> Report | None:
        """The list as of the last rescan, or None before the first one."""
        return None if self._devices is None else Report(self._devices, self._determined)

    async def watch(self) -> AsyncGenerator[Report]:
        """The current list, then each change, then a resend per `resend` seconds of quiet
        (only when a rescan confirmed the list since the last one went out)."""
        sent = -1.0
        while True:
            changed = self._changed  # taken first: a change while the report goes out is seen
            report = self.current
            if report is not None and report.determined > sent:
                sent = report.determined
                yield report
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), self.resend)
