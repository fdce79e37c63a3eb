"""Keeping each eRDMA device's PNETID in the host's SMC pnet table as devices come and go.

The table is checked on every rescan but written only when the devices change. A write that
fails (no smc module, no NET_ADMIN in the host network) is logged once per distinct reason and
tried again for the same devices only after a pause, not on every rescan; new devices are tried
at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from erdma.host.model import RdmaDevice
from erdma.host.run import Runner
from erdma.host.smc import PnetError, SmcUnavailable, default_backend, ensure_host_pnet

log = logging.getLogger(__name__)

RETRY_SECONDS = 30.0  # before the same devices' rows are tried again after a failure

Key = tuple[tuple[str, str | None], ...]


class HostPnet:
    """The host pnet rows of the devices last seen, written through ``runner``."""

    def __init__(
        self,
        runner: Runner,
        host_root: Path,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._runner = runner
        self._root = host_root
        self._clock = clock
        self._written: Key | None = None
        self._failed: Key | None = None
        self._retry_at = 0.0
        self._error = ""  # the failure last logged

    async def keep(self, devices: Sequence[RdmaDevice]) -> None:
        """Write the rows of ``devices`` unless they are in place (or failed a moment ago)."""
        key = tuple((d.name, d.pnetid) for d in devices)
        if key == self._written or not devices:
            return
        if key == self._failed and self._clock() < self._retry_at:
            return
        try:
            await ensure_host_pnet(default_backend(self._runner), devices, self._root)
            self._written, self._error = key, ""
        except (SmcUnavailable, PnetError, OSError) as exc:
            if self._error != str(exc):
                log.warning(
                    "host SMC pnet table not set up: SMC-R in pods will fall back to TCP",
                    extra={"reason": str(exc)},
                )
            self._error = str(exc)
            self._failed, self._retry_at = key, self._clock() + RETRY_SECONDS
