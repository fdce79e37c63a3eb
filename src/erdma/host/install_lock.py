"""One driver installation per node at a time: an flock on a file under the host's `/run`.

Two installers on one node (an agent or driver pod restarted mid-build, or two releases) would
run the package manager and the DKMS build over each other. The lock file lives on the host
(`<root>/run/erdma/driver-install.lock`, a tmpfs: gone at reboot) and the lock belongs to the
open file, which the installer's commands inherit (`Runner.keeping`): the build, which moves out
of the container's cgroup and outlives a killed container, keeps holding it, so the next
attempt waits for that build instead of starting a second one. The kernel drops the lock when
the last holder exits, so a crash never leaves a stale lock behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from erdma.aio import Backoff

log = logging.getLogger(__name__)

LOCK_FILE = Path("run/erdma/driver-install.lock")


@dataclass(frozen=True)
class HeldLock:
    fd: int  # the install's commands inherit it (Runner.keeping)
    waited: bool  # another install held it first: what it did is to be checked again


def lock_path(root: str | os.PathLike[str]) -> Path:
    return Path(root) / LOCK_FILE


@contextlib.asynccontextmanager
async def install_lock(root: str | os.PathLike[str]) -> AsyncIterator[HeldLock]:
    """Hold the node's install lock for the block. Waits (logging once) while another install
    holds it."""
    path = lock_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        waiting = False
        # a build takes minutes: a few seconds of delay after it ends cost nothing
        pause = Backoff(initial=0.5, maximum=5.0)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waiting:
                    log.warning(
                        "another eRDMA driver installation is running on this node; waiting "
                        "for it to finish",
                        extra={"lock": str(path)},
                    )
                    waiting = True
                await asyncio.sleep(pause.next_delay())
        if waiting:
            log.info("the other driver installation finished", extra={"lock": str(path)})
        yield HeldLock(fd, waiting)
    finally:
        os.close(fd)
