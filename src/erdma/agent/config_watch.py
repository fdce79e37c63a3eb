"""Notice a config file changed on disk and say that the agent keeps what it started with.

The agent reads its settings once. A ConfigMap edited in place (or a file changed by hand) used
to be ignored silently until the next restart; the chart rolls the agent pods when the
ConfigMap changes (its `checksum/config` annotation), so the warning matters where that does not
happen: a hand edit, `kubectl edit` without a rollout, a copy on a node. One line per change,
none while the file stays as it is.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def _digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


async def warn_when_changed(path: Path, interval: float) -> None:
    """Every ``interval`` seconds, compare ``path`` with what was loaded; log each change once."""
    loaded = seen = _digest(path)
    while True:
        await asyncio.sleep(interval)
        now = _digest(path)
        if now == seen:
            continue
        seen = now
        if now == loaded:
            log.info("config file is again what this agent loaded", extra={"path": str(path)})
        else:
            log.warning(
                "config file changed on disk; this agent keeps the settings it started with "
                "until it restarts (the chart restarts the agent pods when its ConfigMap changes)",
                extra={"path": str(path)},
            )
