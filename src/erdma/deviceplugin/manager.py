"""Run several ResourcePlugins in one process, each on its own socket, sharing one watcher."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry

from erdma.aio import AsyncService, SupervisedTask, Supervisor
from erdma.deviceplugin.lifecycle import PluginRunner, Timing
from erdma.deviceplugin.metrics import DevicePluginMetrics
from erdma.deviceplugin.plugin import ResourcePlugin
from erdma.deviceplugin.server import validate_stem
from erdma.deviceplugin.watcher import DirWatcher, start_watcher

log = logging.getLogger(__name__)

DEFAULT_KUBELET_ROOT = Path("/var/lib/kubelet")


def device_plugin_dir(kubelet_root: Path) -> Path:
    """`<kubelet root>/device-plugins`, where kubelet.sock and plugin sockets live."""
    return kubelet_root / "device-plugins"


class PluginManager(AsyncService):
    """Serves every plugin until stopped; use as `async with PluginManager(...) as manager`.

    Each plugin's runner is a supervised task: a runner that dies on a bug is logged with its
    traceback and restarted with backoff, and the other resources keep being served.
    """

    def __init__(
        self,
        plugins: Sequence[ResourcePlugin],
        *,
        registry: CollectorRegistry,
        kubelet_root: Path = DEFAULT_KUBELET_ROOT,
        watch_mode: str = "auto",
        poll_interval: float = 0.2,
        timing: Timing | None = None,
    ) -> None:
        _check_unique("resource_name", [p.resource_name for p in plugins])
        _check_unique("socket_stem", [validate_stem(p.socket_stem) for p in plugins])
        self.plugins = list(plugins)
        self.plugin_dir = device_plugin_dir(kubelet_root)
        self.metrics = DevicePluginMetrics(registry)
        self._watch_mode = watch_mode
        self._poll_interval = poll_interval
        self._timing = timing or Timing()
        self._watcher: DirWatcher | None = None
        self._runners: dict[str, PluginRunner] = {}
        self._supervisor: Supervisor | None = None

    @property
    def watcher(self) -> DirWatcher | None:
        return self._watcher

    def runner(self, resource_name: str) -> PluginRunner:
        try:
            return self._runners[resource_name]
        except KeyError:
            raise KeyError(
                f"resource {resource_name!r} is not served: served are {sorted(self._runners)}"
            ) from None

    async def start(self) -> None:
        self._watcher = await start_watcher(self.plugin_dir, self._watch_mode, self._poll_interval)
        for plugin in self.plugins:
            runner = PluginRunner(
                plugin, self.plugin_dir, self._watcher, self.metrics, self._timing
            )
            self._runners[plugin.resource_name] = runner
        self._supervisor = Supervisor(
            [SupervisedTask(f"device plugin {name}", r.run) for name, r in self._runners.items()],
            log,
        )
        await self._supervisor.start()
        log.info(
            "device plugin manager started",
            extra={
                "dir": str(self.plugin_dir),
                "watcher": type(self._watcher).__name__,
                "resources": list(self._runners),
            },
        )

    @property
    def restarts(self) -> dict[str, int]:
        """How often each runner was restarted after dying, by supervised task name."""
        return self._supervisor.restarts if self._supervisor else {}

    async def stop(self) -> None:
        if self._supervisor is not None:
            await self._supervisor.stop()
            self._supervisor = None
        if self._watcher is not None:
            await self._watcher.close()
            self._watcher = None


def _check_unique(key: str, values: list[str]) -> None:
    duplicates = sorted({v for v in values if values.count(v) > 1})
    if duplicates:
        raise ValueError(f"{key} must differ between plugins; repeated: {', '.join(duplicates)}")
