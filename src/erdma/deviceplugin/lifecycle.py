"""The life of one plugin against kubelet: serve, register, and do both again after restarts.

A single loop per plugin owns two facts, "our socket is served" and "kubelet knows us", and
acts on directory events: our socket deleted means re-serve and re-register; `kubelet.sock`
created means re-register (re-serving first if our socket is gone). Failures wait with jittered
exponential backoff, cut short by any kubelet activity, so a returning kubelet sees us at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

from erdma.aio import Backoff
from erdma.api.names import KUBELET_SOCKET
from erdma.deviceplugin.convert import valid_devices
from erdma.deviceplugin.exclusive import ResourceLock
from erdma.deviceplugin.feed import DeviceFeed
from erdma.deviceplugin.metrics import DevicePluginMetrics
from erdma.deviceplugin.plugin import ResourcePlugin
from erdma.deviceplugin.registration import RegistrationError, register
from erdma.deviceplugin.server import PluginServer
from erdma.deviceplugin.servicer import DevicePluginServicer, plugin_options
from erdma.deviceplugin.watcher import DirEvent, DirWatcher

log = logging.getLogger(__name__)

#: how often a resource nothing matches yet is looked at again (`ResourcePlugin.advertised`)
UNMATCHED_POLL = 0.5


@dataclass(frozen=True)
class Timing:
    """Pacing knobs shared by every plugin in a manager."""

    resend_interval: float = 60.0
    register_timeout: float = 5.0
    backoff_initial: float = 0.1
    backoff_max: float = 30.0

    def __post_init__(self) -> None:
        for key in ("resend_interval", "register_timeout", "backoff_initial", "backoff_max"):
            value = getattr(self, key)
            if not value > 0:
                raise ValueError(f"{key}={value!r} is invalid: must be a number of seconds > 0")


class PluginRunner:
    """Serves and registers one ResourcePlugin until cancelled."""

    def __init__(
        self,
        plugin: ResourcePlugin,
        plugin_dir: Path,
        watcher: DirWatcher,
        metrics: DevicePluginMetrics,
        timing: Timing,
    ) -> None:
        self.plugin = plugin
        self.feed = DeviceFeed()
        self._dir = plugin_dir
        self._watcher = watcher
        self._metrics = metrics
        self._timing = timing
        self._server = PluginServer(
            DevicePluginServicer(plugin, self.feed, metrics), plugin_dir, plugin.socket_stem
        )
        #: successful Register calls so far (each kubelet restart adds one)
        self.registrations = 0
        #: identity of the kubelet.sock we last registered through; a new one means a new kubelet
        self._registered_with: tuple[int, int] | None = None
        self._log_extra = {"resource": plugin.resource_name}
        self._left_out: list[tuple[str, str]] = []
        #: the serve or register failure last logged; the same one again is not (a kubelet
        #: away for an hour would otherwise log at every backoff step)
        self._last_failure = ""

    @property
    def socket_path(self) -> Path | None:
        return self._server.socket_path

    def refresh(self, *, force: bool = False) -> None:
        """Ask the plugin for its devices and publish them to every stream."""
        try:
            devices, left_out = valid_devices(self.plugin.devices())
        except Exception:
            log.exception("plugin failed to list devices; keeping last list", extra=self._log_extra)
            return
        if left_out != self._left_out:  # once per change, not at every re-send
            for device, reason in left_out:
                log.error(
                    "device left out of the list",
                    extra={**self._log_extra, "device": device, "reason": reason},
                )
            self._left_out = left_out
        self._metrics.set_devices(self.plugin.resource_name, devices)
        if self.feed.publish(devices, force=force) and not force:
            log.info("device list changed", extra={**self._log_extra, "devices": len(devices)})

    async def run(self) -> None:
        """Serve and stay registered until cancelled, while no other process on this node
        serves the same resource (see `erdma.deviceplugin.exclusive`)."""
        lock = ResourceLock(self._dir, self.plugin.socket_stem, self.plugin.resource_name)
        async with lock:
            await self._serve_until_cancelled()

    async def _serve_until_cancelled(self) -> None:
        loop = asyncio.get_running_loop()
        events = self._watcher.subscribe()

        def on_change() -> None:
            loop.call_soon_threadsafe(self.refresh)

        remove_listener = self.plugin.add_change_listener(on_change)
        resend = loop.create_task(self._resend_forever())
        try:
            await self._serve_and_register(events)
        finally:
            resend.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await resend
            remove_listener()
            self._watcher.unsubscribe(events)
            await self._server.stop()

    async def _resend_forever(self) -> None:
        """Safety net: every stream periodically gets the full list even without a change."""
        while True:
            await asyncio.sleep(self._timing.resend_interval)
            self.refresh(force=True)

    async def _serve_and_register(self, events: asyncio.Queue[DirEvent]) -> None:
        backoff = Backoff(self._timing.backoff_initial, maximum=self._timing.backoff_max)
        need_serve = need_register = True
        while True:
            if need_serve:
                need_serve = not await self._serve()
            unmatched = not self.plugin.advertised()
            if not need_serve and need_register and not unmatched:
                need_register = not await self._register()
            delay: float | None
            if need_serve or (need_register and not unmatched):
                delay = backoff.next_delay()
            elif need_register:
                delay = UNMATCHED_POLL  # registered as soon as something matches
            else:
                delay = None
                backoff.reset()
            try:
                event = await asyncio.wait_for(events.get(), delay)
            except TimeoutError:
                continue
            serve, reg = self._reaction(event)
            if serve or reg:
                log.info(
                    "kubelet directory changed",
                    extra={**self._log_extra, "event": event.kind, "file": event.name},
                )
                need_serve, need_register = need_serve or serve, need_register or reg
                backoff.reset()

    def _reaction(self, event: DirEvent) -> tuple[bool, bool]:
        """(re-serve?, re-register?) for one directory event."""
        path = self._server.socket_path
        ours_gone = path is None or not path.exists()
        if event.kind == "deleted" and path is not None and event.name == path.name:
            return True, True
        if event.kind == "rescan" or (event.kind == "created" and event.name == KUBELET_SOCKET):
            new_kubelet = self._kubelet_identity() != self._registered_with
            return ours_gone, ours_gone or new_kubelet
        return False, False

    def _kubelet_identity(self) -> tuple[int, int] | None:
        """(inode, ctime) of kubelet.sock: inodes alone get reused by a recreated file."""
        try:
            st = (self._dir / KUBELET_SOCKET).stat()
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_ctime_ns

    async def _serve(self) -> bool:
        """(Re)serve on a fresh socket; a new kubelet also gets a freshly read device list."""
        self.refresh()
        try:
            await self._server.start()
        except OSError as err:
            self._failed("cannot serve plugin socket", str(err))
            return False
        return True

    def _failed(self, what: str, error: str) -> None:
        """Log a failure of serving or registering when it differs from the last one."""
        if error != self._last_failure:
            retry = "with backoff, at once when kubelet restarts; logged again when it changes"
            log.warning(what, extra={**self._log_extra, "error": error, "retrying": retry})
        self._last_failure = error

    async def _register(self) -> bool:
        path = self._server.socket_path
        assert path is not None, "register is only attempted while serving"
        kubelet = self._kubelet_identity()
        try:
            await register(
                self._dir / KUBELET_SOCKET,
                endpoint=path.name,
                resource_name=self.plugin.resource_name,
                options=plugin_options(self.plugin),
                timeout=self._timing.register_timeout,
            )
        except RegistrationError as err:
            self._metrics.registrations.labels(self.plugin.resource_name, "error").inc()
            self._failed("registration failed", str(err))
            return False
        self._last_failure = ""
        self._metrics.registrations.labels(self.plugin.resource_name, "ok").inc()
        self.registrations += 1
        self._registered_with = kubelet
        log.info("registered with kubelet", extra={**self._log_extra, "endpoint": path.name})
        return True
