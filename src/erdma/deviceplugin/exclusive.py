"""One server per resource per node: a lock two agents on one node (a rollout overlap, a
second DaemonSet) take in turn instead of both registering and then losing the resource.

Kubelet keeps only the latest registration of a resource; when that agent exits, its socket
goes and the node loses the resource although the other agent still serves. So a runner
serves only while it holds `flock` on a lock directory next to the plugin sockets: kubelet
wipes files there when it restarts, never directories, and the kernel drops the lock when the
holder exits, even by SIGKILL, so the waiting agent takes over at once.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)


def lock_dir(plugin_dir: Path, stem: str) -> Path:
    """`<device-plugins>/.<stem>.lock/`, a directory so kubelet's clean-up leaves it alone."""
    return plugin_dir / f".{stem}.lock"


class ResourceLock:
    """``async with ResourceLock(dir, stem, resource):`` waits until no other process serves the
    resource on this node, logging once that it waits; released on exit."""

    def __init__(self, plugin_dir: Path, stem: str, resource: str, poll: float = 0.2) -> None:
        self.path = lock_dir(plugin_dir, stem)
        self.resource = resource
        self.poll = poll
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        """Take the lock if free; False when another process holds it."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    async def __aenter__(self) -> ResourceLock:
        if not self.try_acquire():
            log.warning(
                "another process serves this resource on this node; waiting for it to stop",
                extra={"resource": self.resource, "lock": str(self.path)},
            )
            while not self.try_acquire():  # polled, so a cancelled wait leaves no thread behind
                await asyncio.sleep(self.poll)
            log.info("took over serving the resource", extra={"resource": self.resource})
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor releases the flock
            self._fd = None
