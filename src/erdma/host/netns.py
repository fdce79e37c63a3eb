"""Run code inside another network namespace, given the namespace's file path.

setns(2) with CLONE_NEWNET changes only the calling thread, so the work runs on a dedicated
thread that enters the namespace and then ends; the agent's own threads never change namespace.
Sockets opened and /proc/sys/net files read or written there belong to the entered namespace.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


class NetnsError(OSError):
    """A network namespace path that cannot be entered."""


def netns_id(path: str = "/proc/thread-self/ns/net") -> int:
    """The inode identifying a network namespace (the calling thread's by default)."""
    return os.stat(path).st_ino


def enter(path: str) -> None:
    """Move the calling thread into the network namespace at `path`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise NetnsError(
            exc.errno, f"cannot open network namespace {path}: {exc.strerror}"
        ) from exc
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            code = ctypes.get_errno()
            raise NetnsError(
                code, f"cannot enter network namespace {path}: {os.strerror(code)} (errno {code})"
            )
    finally:
        os.close(fd)


def run_in_netns(path: str | None, fn: Callable[[], T]) -> T:
    """Call `fn` inside the namespace at `path` (None: here, in the caller's namespace)."""
    if path is None:
        return fn()
    outcome: dict[str, object] = {}

    def worker() -> None:
        try:
            enter(path)
            outcome["value"] = fn()
        except BaseException as exc:  # handed back to the caller's thread below
            outcome["error"] = exc

    thread = threading.Thread(target=worker, name=f"netns:{os.path.basename(path)}", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


async def in_netns(path: str | None, fn: Callable[[], T]) -> T:
    """`run_in_netns` without blocking the event loop."""
    return await asyncio.to_thread(run_in_netns, path, fn)
