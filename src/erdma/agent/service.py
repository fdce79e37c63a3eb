"""The node agent: rescan the host, publish snapshots to the resource plugins, serve kubelet.

Discovery is re-run every `rescanInterval` (0.5 s by default: a scan reads a few dozen small
sysfs files), so a port going down, a /dev node vanishing, a hot-added device or a driver that
loads late reaches kubelet within about a second, without restarting anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from erdma.agent.config import AgentConfig
from erdma.agent.erdma import ErdmaPlugin, ErdmaPolicy
from erdma.agent.exposure import Exposure, parse_rules, select
from erdma.agent.nccl import nccl_env
from erdma.agent.prepare import keep_preparing, prepare
from erdma.agent.shared import SharedPlugin, check_disjoint
from erdma.deviceplugin.lifecycle import Timing
from erdma.deviceplugin.manager import PluginManager
from erdma.deviceplugin.plugin import ContainerAllocation, ResourcePlugin
from erdma.host.devices import scan
from erdma.host.driver import choose_mode
from erdma.host.model import DeviceSnapshot, RdmaDevice
from erdma.host.run import Runner

log = logging.getLogger(__name__)


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.scans = Histogram(
            "erdma_agent_scan_duration_seconds",
            "Time to scan the host's RDMA devices.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
            registry=registry,
        )
        self.allocations = Counter(
            "erdma_agent_allocations",
            "Containers given a physical device by Allocate, by device.",
            ["resource", "device"],
            registry=registry,
        )


class Agent:
    """Everything `erdma agent` runs, as one object tests can start in-process."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        registry: CollectorRegistry | None = None,
        timing: Timing | None = None,
    ) -> None:
        self.config = config
        self.registry = registry or CollectorRegistry()
        self.metrics = AgentMetrics(self.registry)
        self.exposure = self._exposure()
        self.snapshot = scan(config.host_root)
        self.runner = Runner(host_namespace=config.host_namespace)
        self.mode, self.mode_reason = choose_mode(config.prefer_driver, self.snapshot.gpus)
        log.info("driver mode chosen", extra={"mode": self.mode.value, "why": self.mode_reason})
        self.erdma = ErdmaPlugin(
            ErdmaPolicy(
                mode=self.mode,
                slots_per_device=config.slots_per_device,
                allocate_all=config.allocate_all_devices,
                exposure=self.exposure,
            ),
            extra_env=self._nccl_env,
            finish_allocation=self._count_allocation,
        )
        self.shared = [
            SharedPlugin(
                resource,
                host_root=config.host_root,
                non_host_network_rdma=config.non_host_network_rdma,
            )
            for resource in config.shared_resources
            if "shared" in config.resources
        ]
        check_disjoint(self.snapshot, [p.config for p in self.shared])
        self.plugins: list[ResourcePlugin] = [*self.shared]
        if "aliyun/erdma" in config.resources:
            self.plugins.insert(0, self.erdma)
        self._publish(self.snapshot)
        self.manager = PluginManager(
            self.plugins,
            registry=self.registry,
            kubelet_root=config.kubelet_dir,
            watch_mode=config.watch_mode,
            timing=timing,
        )

    def _publish(self, snapshot: DeviceSnapshot) -> None:
        self.erdma.update(snapshot)
        for plugin in self.shared:
            plugin.update(snapshot)

    def _exposure(self) -> Exposure:
        """Local mode picks devices by `exposedLocalERIs`; a bad entry fails at start."""
        if not self.config.local_eri_discovery:
            return Exposure(None, "every eRDMA device on the node")
        exposure = select(parse_rules(self.config.exposed_local_eris), self.config.instance_id)
        log.info("local mode device selection", extra={"rule": exposure.reason})
        return exposure

    def _nccl_env(self, devices: Sequence[RdmaDevice]) -> dict[str, str]:
        return nccl_env(devices, self.mode, self.config.nccl).envs

    async def _prepare_node(self) -> None:
        """Load erdma in the chosen mode; retried with backoff while the driver is missing."""
        await keep_preparing(
            lambda: prepare(
                self.runner,
                self.config.host_root,
                self.mode.value,
                self.config.driver_install_command or None,
                self.snapshot.gpus,
            )
        )

    def _count_allocation(
        self, devices: Sequence[RdmaDevice], allocation: ContainerAllocation
    ) -> None:
        for device in devices:
            self.metrics.allocations.labels(self.erdma.resource_name, device.name).inc()

    def rescan(self) -> DeviceSnapshot:
        started = time.perf_counter()
        snapshot = scan(self.config.host_root)
        self.metrics.scans.observe(time.perf_counter() - started)
        return snapshot

    async def _rescan_forever(self) -> None:
        warned_no_driver = False
        while True:
            await asyncio.sleep(self.config.rescan_interval)
            self.snapshot = await asyncio.to_thread(self.rescan)
            if not self.snapshot.devices and not warned_no_driver:
                log.warning(
                    "no RDMA devices yet; still watching",
                    extra={"erdma_loaded": self.snapshot.modules.erdma_loaded},
                )
            warned_no_driver = not self.snapshot.devices
            self._publish(self.snapshot)

    async def run(self, stop: asyncio.Event) -> None:
        if self.config.metrics_port:
            start_http_server(self.config.metrics_port, registry=self.registry)
            log.info("metrics served", extra={"port": self.config.metrics_port})
        async with self.manager:
            tasks = [asyncio.create_task(self._rescan_forever())]
            if self.config.prepare_driver:
                tasks.append(asyncio.create_task(self._prepare_node()))
            try:
                await stop.wait()
            finally:
                for task in tasks:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
