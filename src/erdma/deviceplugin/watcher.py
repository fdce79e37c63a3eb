"""Watch the kubelet device-plugins directory for sockets appearing and disappearing.

A restarting kubelet deletes every socket in the directory and then creates `kubelet.sock`
again; plugins learn of it from these events. inotify (through ctypes, its fd on the asyncio
loop) reacts at once; polling is the fallback where inotify is unavailable (some sandboxes,
exhausted `max_user_instances`) and can be chosen explicitly.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

EventKind = Literal["created", "deleted", "rescan"]
WATCH_MODES = ("auto", "inotify", "poll")

IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_WATCH_MASK = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF
# the watched directory itself is gone: deleted or moved away
_GONE = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED
# the same seen from its parent, which is watched too: while something keeps the deleted
# directory alive (an open lock directory inside it), the directory's own watch reports nothing
_PARENT_MASK = IN_DELETE | IN_MOVED_FROM | IN_CREATE | IN_MOVED_TO
_EVENT_HEADER = struct.Struct("iIII")


@dataclass(frozen=True)
class DirEvent:
    """`name` appeared or vanished; `rescan` means events may be lost, so check the directory."""

    kind: EventKind
    name: str = ""


class DirWatcher(abc.ABC):
    """Fans directory events out to subscribers, each with its own queue."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._queues: list[asyncio.Queue[DirEvent]] = []

    def subscribe(self) -> asyncio.Queue[DirEvent]:
        queue: asyncio.Queue[DirEvent] = asyncio.Queue()
        self._queues.append(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[DirEvent]) -> None:
        with contextlib.suppress(ValueError):
            self._queues.remove(queue)

    def _emit(self, event: DirEvent) -> None:
        for queue in self._queues:
            queue.put_nowait(event)

    @abc.abstractmethod
    async def start(self) -> None:
        """Begin watching; the directory is created if missing."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop watching and release the fd or task."""


class InotifyUnavailable(OSError):
    """inotify cannot be used here; the message carries the errno text."""


class _Libc:
    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        try:
            self.init1 = libc.inotify_init1
            self.add_watch = libc.inotify_add_watch
        except AttributeError as err:
            raise InotifyUnavailable(f"libc has no inotify: {err}") from err
        self.add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]


class InotifyWatcher(DirWatcher):
    """inotify on the directory; re-arms itself if the directory is removed and recreated."""

    def __init__(self, directory: Path, rearm_interval: float = 0.5) -> None:
        super().__init__(directory)
        self._libc = _Libc()
        self._rearm_interval = rearm_interval
        self._fd = -1
        self._wd = -1  # the watch on the directory now at the path; older ones are ignored
        self._parent_wd = -1
        self._rearm: asyncio.Task[None] | None = None
        self._back = asyncio.Event()  # the directory was made again: re-arm without waiting

    def _check(self, result: int, what: str) -> int:
        if result < 0:
            errno = ctypes.get_errno()
            raise InotifyUnavailable(errno, f"{what} {self.directory}: {os.strerror(errno)}")
        return result

    async def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._fd = self._check(self._libc.init1(IN_NONBLOCK | IN_CLOEXEC), "inotify_init1 for")
        try:
            self._add_watch()
        except OSError:
            os.close(self._fd)
            self._fd = -1
            raise
        asyncio.get_running_loop().add_reader(self._fd, self._on_readable)

    def _add_watch(self) -> None:
        """Watch the directory, and its parent for the directory being removed or moved."""
        watch = self._libc.add_watch
        path, parent = os.fsencode(self.directory), os.fsencode(self.directory.parent)
        self._wd = self._check(watch(self._fd, path, _WATCH_MASK), "inotify_add_watch")
        self._parent_wd = self._check(watch(self._fd, parent, _PARENT_MASK), "inotify_add_watch")

    def _on_readable(self) -> None:
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return
        offset = 0
        while offset + _EVENT_HEADER.size <= len(data):
            wd, mask, _cookie, length = _EVENT_HEADER.unpack_from(data, offset)
            raw = data[offset + _EVENT_HEADER.size : offset + _EVENT_HEADER.size + length]
            offset += _EVENT_HEADER.size + length
            name = os.fsdecode(raw.rstrip(b"\0"))
            if mask & IN_Q_OVERFLOW:
                self._emit(DirEvent("rescan"))
            elif wd == self._parent_wd:
                if name != self.directory.name:
                    continue
                if not mask & (IN_CREATE | IN_MOVED_TO):
                    self._vanished()
                elif self._rearm is not None:
                    self._back.set()
            elif wd != self._wd:
                continue  # a directory that was deleted or moved away earlier
            elif mask & (IN_CREATE | IN_MOVED_TO):
                self._emit(DirEvent("created", name))
            elif mask & (IN_DELETE | IN_MOVED_FROM):
                self._emit(DirEvent("deleted", name))
            elif mask & _GONE:
                self._vanished()

    def _vanished(self) -> None:
        if self._rearm is None:
            log.warning("watched directory vanished", extra={"dir": str(self.directory)})
            self._rearm = asyncio.get_running_loop().create_task(self._rearm_when_back())

    async def _rearm_when_back(self) -> None:
        """The directory itself went away: watch it again once it exists, then rescan."""
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._back.wait(), self._rearm_interval)
                self._back.clear()
                try:
                    self._add_watch()
                except OSError:
                    continue
                self._emit(DirEvent("rescan"))
                return
        finally:
            self._rearm = None

    async def close(self) -> None:
        if self._rearm is not None:
            self._rearm.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._rearm
        if self._fd >= 0:
            asyncio.get_running_loop().remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1


class PollingWatcher(DirWatcher):
    """Compares directory listings (name -> inode and ctime) every `interval` seconds.

    A socket deleted and recreated between two polls often gets the same inode back, so the
    change time is compared as well.
    """

    def __init__(self, directory: Path, interval: float = 0.2) -> None:
        if interval <= 0:
            raise ValueError(f"poll interval={interval!r} is invalid: must be > 0 seconds")
        super().__init__(directory)
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    def _listing(self) -> dict[str, tuple[int, int]]:
        listing = {}
        try:
            for entry in os.scandir(self.directory):
                with contextlib.suppress(FileNotFoundError):
                    st = entry.stat(follow_symlinks=False)
                    listing[entry.name] = (st.st_ino, st.st_ctime_ns)
        except FileNotFoundError:
            pass
        return listing

    async def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._task = asyncio.get_running_loop().create_task(self._poll(self._listing()))

    async def _poll(self, before: dict[str, tuple[int, int]]) -> None:
        while True:
            await asyncio.sleep(self.interval)
            now = self._listing()
            for name, identity in before.items():
                if now.get(name) != identity:
                    self._emit(DirEvent("deleted", name))
            for name, identity in now.items():
                if before.get(name) != identity:
                    self._emit(DirEvent("created", name))
            before = now

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


async def start_watcher(
    directory: Path,
    mode: str = "auto",
    poll_interval: float = 0.2,
    inotify: Callable[[Path], DirWatcher] = InotifyWatcher,
) -> DirWatcher:
    """Start a watcher of the chosen `mode`: "inotify", "poll", or "auto" (inotify, else poll).

    `inotify` builds the inotify watcher; it is a parameter so the fallback can be exercised.
    """
    if mode not in WATCH_MODES:
        accepted = ", ".join(WATCH_MODES)
        raise ValueError(f"watch mode {mode!r} is invalid: accepted values are {accepted}")
    watcher: DirWatcher
    if mode != "poll":
        try:
            watcher = inotify(directory)
            await watcher.start()
            return watcher
        except InotifyUnavailable as err:
            if mode == "inotify":
                raise
            log.warning(
                "inotify unavailable, polling the device-plugins directory",
                extra={"dir": str(directory), "error": str(err), "interval": poll_interval},
            )
    watcher = PollingWatcher(directory, poll_interval)
    await watcher.start()
    return watcher
