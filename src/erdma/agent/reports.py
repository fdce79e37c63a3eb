"""What changed about the devices, told once: skipped devices in the log, health in Events.

The agent rescans twice a second; a persistent condition must be reported when it starts, when
its reason changes and when it ends, never at every rescan.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from erdma.agent.events import NodeEvents
from erdma.host.health import Health
from erdma.host.model import DeviceSnapshot

log = logging.getLogger(__name__)


class DeviceReports:
    def __init__(self, events: NodeEvents) -> None:
        self.events = events
        self._health_seen: dict[str, bool] = {}
        self._skipped_seen: dict[str, str] = {}

    def skipped(self, snapshot: DeviceSnapshot) -> None:
        """A device discovery keeps out is logged when that starts or its reason changes, and
        once more when it is back."""
        now = {s.name: s.reason for s in snapshot.skipped}
        for name, reason in now.items():
            if self._skipped_seen.get(name) != reason:
                log.warning("skipping RDMA device", extra={"device": name, "reason": reason})
        for name in sorted(self._skipped_seen.keys() - now.keys()):
            log.info("RDMA device no longer skipped", extra={"device": name})
        self._skipped_seen = now

    def health_changes(self, health: Mapping[str, Health]) -> None:
        """A Node Event when an exposed device turns Unhealthy or recovers."""
        for name, verdict in health.items():
            before = self._health_seen.get(name)
            if before is not None and before != verdict.healthy:
                message = f"{name}: {verdict.message}"
                if verdict.healthy:
                    self.events.emit("Normal", "ErdmaDeviceHealthy", message)
                else:
                    self.events.emit("Warning", "ErdmaDeviceUnhealthy", message)
            self._health_seen[name] = verdict.healthy
