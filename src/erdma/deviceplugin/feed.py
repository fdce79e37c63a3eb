"""The latest device list, fanned out to any number of ListAndWatch streams.

There is no shared queue: each stream remembers the version it last sent and waits for a
newer one, so a stream that dies (a restarted kubelet's old connection) can never swallow an
update meant for another, and a new stream always starts from the full current list.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from erdma.deviceplugin.plugin import PluginDevice


class DeviceFeed:
    """Versioned snapshots of one plugin's device list; must be used from one event loop."""

    def __init__(self, devices: Sequence[PluginDevice] = ()) -> None:
        self._version = 0
        self._devices: tuple[PluginDevice, ...] = tuple(devices)
        self._changed = asyncio.Event()
        self._health: dict[str, bool] = {}
        self._health_version = -1

    def snapshot(self) -> tuple[int, tuple[PluginDevice, ...]]:
        return self._version, self._devices

    def health(self) -> Mapping[str, bool]:
        """{ID: healthy} of the current list, indexed once per version rather than per call:
        every Allocate checks its IDs against thousands of advertised slots."""
        if self._health_version != self._version:
            self._health = {d.id: d.healthy for d in self._devices}
            self._health_version = self._version
        return self._health

    def publish(self, devices: Sequence[PluginDevice], *, force: bool = False) -> bool:
        """Make `devices` current; wakes every stream if it differs (or `force`, for re-sends)."""
        new = tuple(devices)
        if new == self._devices and not force:
            return False
        self._version += 1
        self._devices = new
        woken, self._changed = self._changed, asyncio.Event()
        woken.set()
        return True

    async def next_after(self, version: int) -> tuple[int, tuple[PluginDevice, ...]]:
        """The first snapshot newer than `version` (at once if there already is one)."""
        while self._version == version:
            await self._changed.wait()
        return self.snapshot()
