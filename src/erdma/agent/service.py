"""The node agent: rescan the host, publish snapshots to the resource plugins, serve kubelet.

Discovery is re-run every `rescanInterval` (0.5 s by default: a scan reads a few dozen small
sysfs files), so a port going down, a /dev node vanishing, a hot-added device or a driver that
loads late reaches kubelet within about a second, without restarting anything.

The agent names no plugin: it builds the ones `resources` enables through the plugin registry
(`erdma.agent.plugins`), hands each every snapshot and serves their servicers to kubelet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from erdma.agent import startup
from erdma.agent.cdi_spec import NodeCdiSpec
from erdma.agent.config import AgentConfig, ConfigError
from erdma.agent.events import NodeEvents
from erdma.agent.exposure import Exposure, by_macs, parse_rules, select
from erdma.agent.health import device_health
from erdma.agent.host_pnet import HostPnet
from erdma.agent.kube_access import KubeAccess
from erdma.agent.metrics import AgentMetrics
from erdma.agent.nccl import nccl_env
from erdma.agent.plugins import PluginContext, PluginRegistry, default_registry
from erdma.agent.plugins.view import plugins_view
from erdma.agent.prepare import prepare_until_ready
from erdma.agent.probes import Check, Probes, registered, serve
from erdma.agent.reports import DeviceReports
from erdma.aio import Heartbeat, SupervisedTask, Supervisor, retry_until_done
from erdma.api.names import ERDMA_RESOURCE
from erdma.deviceplugin.lifecycle import Timing
from erdma.deviceplugin.manager import PluginManager
from erdma.host.devices import scan
from erdma.host.driver import DriverMode, choose_mode
from erdma.host.metadata import MetadataClient
from erdma.host.model import DeviceSnapshot, RdmaDevice
from erdma.host.run import Runner

if TYPE_CHECKING:  # imported where used: only DRA, Regular mode and SMC-R load their clients
    from erdma.dra.driver import DraDriver

log = logging.getLogger(__name__)


class Agent:
    """Everything `erdma agent` runs, as one object tests can start in-process."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        registry: CollectorRegistry | None = None,
        timing: Timing | None = None,
        runner: Runner | None = None,
        netns: str | None = None,
        plugins: PluginRegistry | None = None,
    ) -> None:
        """``netns``: the network namespace (a path) whose links the agent configures, None for
        its own; a benchmark that simulates many nodes on one machine gives each its own.
        ``plugins``: where the plugins `resources` names come from (`default_registry()`)."""
        if config.dra.enabled and not config.node_name:  # refused before anything is logged
            raise ConfigError("dra.enabled needs the node name (NODE_NAME or --node-name)")
        factories = (plugins or default_registry()).select(config.resources)
        self.config = config
        self.netns = netns
        # set by a rescan that finds a device the one before did not (Regular mode's retry cue)
        self.devices_appeared = asyncio.Event()
        self.kube = KubeAccess(config.kubeconfig or None)  # Events, Regular mode and DRA share it
        self.events = NodeEvents(
            config.node_name, config.kubeconfig or None, client=self.kube.client
        )
        self.reports = DeviceReports(self.events)
        self.registry = registry or CollectorRegistry()
        self.metrics = AgentMetrics(self.registry)
        self.cdi_spec = NodeCdiSpec(config.cdi_spec_dir, on_failure=self._cdi_unwritable)
        self.exposure = startup.initial_exposure(config)
        self.exposed = replace(self.exposure, macs=frozenset())  # none until netdevs are up
        self.snapshot = scan(config.host_root)
        self.runner = runner or Runner(host_namespace=config.host_namespace)
        self.host_pnet = HostPnet(self.runner, config.host_root)
        self.mode, self.mode_reason = choose_mode(config.prefer_driver, self.snapshot.gpus)
        log.info("driver mode chosen", extra={"mode": self.mode.value, "why": self.mode_reason})
        startup.warn_loaded_mode(config, self.snapshot, self.mode)
        self._prepared = False
        context = PluginContext(
            config=config,
            snapshot=self.snapshot,
            mode=self.mode,
            exposure=self.exposure,
            exposed=self.exposed,
            runner=self.runner,
            metrics=self.metrics,
            reports=self.reports,
            nccl_env=self._nccl_env,
            cdi_ready=lambda: self.cdi_spec.current,
        )
        self.plugins = [build(context) for build in factories]
        # Local and Regular mode decide which ERIs are exposed; until then DRA publishes nothing
        self._serves_eris = ERDMA_RESOURCE in config.resources  # not the shared DaemonSet
        self._exposure_decided = not self._serves_eris
        self.dra = self._dra_driver() if config.dra.enabled else None
        self._publish(self.snapshot)
        self.manager = PluginManager(
            [servicer for plugin in self.plugins for servicer in plugin.servicers],
            registry=self.registry,
            kubelet_root=config.kubelet_dir,
            watch_mode=config.watch_mode,
            timing=timing,
        )
        self.heartbeat = Heartbeat()
        self.supervisor = Supervisor(self._background_tasks(), log)

    def _publish(self, snapshot: DeviceSnapshot) -> None:
        view = plugins_view(snapshot, self.config.dra)
        for plugin in self.plugins:
            plugin.update(view)
        self.reports.skipped(snapshot)
        self._publish_dra(snapshot)
        if self.config.device_list_strategy.uses_cdi:
            # pods get rdma_cm only in the default (iWARP) mode, as `aliyun/erdma` hands it out
            self.cdi_spec.update(snapshot, with_rdma_cm=self.mode is DriverMode.DEFAULT)

    def _cdi_unwritable(self, problem: str) -> None:
        self.events.emit("Warning", "CdiSpecNotWritten", f"{problem}; pods get device specs")

    def _dra_driver(self) -> DraDriver:
        """The DRA front end on the same snapshot, health rule and NCCL env as the plugins."""
        from erdma.dra.driver import DraDriver

        return DraDriver(
            self.config.dra,
            node_name=self.config.node_name,
            host_root=self.config.host_root,
            kubelet_dir=self.config.kubelet_dir,
            cdi_dir=self.config.cdi_spec_dir,
            client=self.kube.client(),
            health=device_health,
            mode=self.mode.value,
            extra_env=self._nccl_env,
        )

    def _publish_dra(self, snapshot: DeviceSnapshot) -> None:
        """Give the DRA driver the snapshot, limited to the eRDMA devices now exposed, once the
        exposure is decided: before, the driver would publish a slice without them over the
        one the last agent left, and register with kubelet while refusing their claims."""
        if self.dra is not None and self._exposure_decided:
            exposed = self.exposed.select(snapshot.erdma_devices)
            self.dra.publish(snapshot, exposed={d.name for d in exposed})

    def _nccl_env(self, devices: Sequence[RdmaDevice]) -> dict[str, str]:
        return nccl_env(devices, self.mode, self.config.nccl).envs

    async def _ensure_host_pnet(self) -> None:
        """Each eRDMA device's PNETID in the host pnet table (default/compat), once per change."""
        if self.mode.wants_smc:
            await self.host_pnet.keep(self.snapshot.erdma_devices)

    async def _prepare_node(self) -> None:
        """Load erdma in the chosen mode (retried with backoff while the driver is missing),
        then keep the host pnet table in step with the devices."""
        gpus = self.snapshot.gpus
        await prepare_until_ready(self.config, self.runner, self.mode, gpus, self.events)
        self._prepared = True
        await self._ensure_host_pnet()

    def rescan(self) -> DeviceSnapshot:
        started = time.perf_counter()
        snapshot = scan(self.config.host_root)
        self.metrics.scans.observe(time.perf_counter() - started)
        return snapshot

    async def _rescan_forever(self) -> None:
        """Rescan and publish forever; a failing round is logged and the next one runs."""
        warned_no_driver = False
        last_error = ""
        while True:
            await asyncio.sleep(self.config.rescan_interval)
            try:
                before = {d.name for d in self.snapshot.devices}
                self.snapshot = await asyncio.to_thread(self.rescan)
                if {d.name for d in self.snapshot.devices} - before:
                    self.devices_appeared.set()
                if not self.snapshot.devices and not warned_no_driver:
                    log.warning(
                        "no RDMA devices yet; still watching",
                        extra={"erdma_loaded": self.snapshot.modules.erdma_loaded},
                    )
                warned_no_driver = not self.snapshot.devices
                self._publish(self.snapshot)
                if self._prepared or not self.config.prepare_node:  # prepared elsewhere
                    await self._ensure_host_pnet()
                last_error = ""
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                if error != last_error:  # once per distinct problem, not twice a second
                    log.exception("rescan round failed; still watching")
                last_error = error

    async def _regular_mode(self) -> None:
        """Follow this node's ERdmaDevice for good (a watch, not polling): every change exposes
        exactly its Ready devices, each secondary ERI's netdev brought up first. Never a
        one-shot: the controller replaces a lost ERI with a new MAC, and one Failed card must
        not hide the working ones. A failed netdev bring-up (metadata or the link lagging the
        controller's Ready by a few seconds) is retried with backoff."""
        if not self.config.node_name:
            log.error("Regular mode needs the node name (NODE_NAME or --node-name)")
            return
        from erdma.agent.eri_netdevs import metadata_bring_up
        from erdma.agent.regular import follow_devices
        from erdma.kube.client import KubeApi

        kube = KubeApi(self.kube.client())
        metadata = MetadataClient(self.config.metadata_url)

        def expose(macs: frozenset[str]) -> None:
            reason = "Regular mode: no device of this node's ERdmaDevice is Ready"
            if macs:
                reason = f"Regular mode: Ready ERIs {', '.join(sorted(macs))}"
            self._expose(by_macs(macs, reason))
            log.info("exposing the node's Ready ERIs", extra={"macs": sorted(macs)})

        bring_up = metadata_bring_up(metadata, self.netns)
        await follow_devices(
            kube,
            self.config.node_name,
            bring_up,
            expose,
            jumbo_mtu=self.config.jumbo_frame_mtu,
            devices_appeared=self.devices_appeared,
        )

    async def _local_mode(self) -> None:
        """Local mode: keep the selected ERIs' netdevs up, expose those (erdma.agent.local)."""
        from erdma.agent.local import follow_local

        metadata = MetadataClient(self.config.metadata_url)
        state = lambda: (self.exposure, self.snapshot)  # noqa: E731 - read at every round
        interval = self.config.rescan_interval
        await follow_local(state, self._expose, metadata, interval, netns=self.netns)

    def _expose(self, exposure: Exposure) -> None:
        """Local or Regular mode decided which ERIs to expose: the plugins and the DRA driver
        follow at once."""
        for plugin in self.plugins:
            plugin.expose(exposure)
        self.exposed = exposure
        self._exposure_decided = True
        self._publish_dra(self.snapshot)

    async def _local_instance_id(self) -> None:
        """Local mode without `instanceID`: ask instance metadata; `_local_mode` re-selects."""
        metadata = MetadataClient(self.config.metadata_url)
        what = "reading the instance id from metadata"
        instance = await retry_until_done(what, metadata.instance_id, log)
        rules = parse_rules(self.config.exposed_local_eris)
        self.exposure = select(rules, instance)
        selection = {"instance": instance, "rule": self.exposure.reason}
        log.info("local mode device selection", extra=selection)

    def _background_tasks(self) -> list[SupervisedTask]:
        """The agent's long-lived work. Every task is restarted with backoff when it dies: the
        device plugins keep serving kubelet whatever else fails, so nothing here may take the
        process down."""
        tasks = [
            SupervisedTask("rescan", self._rescan_forever),
            SupervisedTask("node events", self.events.post_forever, forever=self.events.possible),
            SupervisedTask("heartbeat", self.heartbeat.beat_forever),
        ]
        if self.config.metrics_port:  # a port in use is never fatal: the plugins serve on
            tasks.append(SupervisedTask("metrics", self._serve_metrics, forever=False))
        if self.config.prepare_node:
            tasks.append(SupervisedTask("prepare node", self._prepare_node, forever=False))
        if self._serves_eris and not self.config.local_eri_discovery:
            tasks.append(SupervisedTask("regular mode", self._regular_mode, forever=False))
        elif self._serves_eris:
            tasks.append(SupervisedTask("local mode", self._local_mode))
        if (
            self._serves_eris
            and self.config.local_eri_discovery
            and (startup.needs_instance_id(self.config))
        ):
            tasks.append(SupervisedTask("instance id", self._local_instance_id, forever=False))
        return tasks

    async def _serve_metrics(self) -> None:
        port = self.config.metrics_port

        async def start() -> None:
            serve(port, self.registry, Probes(self.heartbeat, self._readiness()))
            log.info("metrics, /healthz and /readyz served", extra={"port": port})

        what = f"serving the metrics port {port} (the device plugins serve meanwhile)"
        await retry_until_done(what, start, log)

    def _readiness(self) -> list[Check]:
        def driver() -> str | None:
            if self.config.prepare_node and not self._prepared:
                return f"erdma not loaded in driver mode {self.mode.value} yet (see its Events)"
            return None

        served = [registered(self.manager.runner(p.resource_name)) for p in self.manager.plugins]
        return [driver, *served]

    async def run(self, stop: asyncio.Event) -> None:
        async with contextlib.AsyncExitStack() as services:
            services.push_async_callback(self.kube.aclose)  # last, after every user stopped
            await services.enter_async_context(self.manager)
            if self.dra is not None:
                await services.enter_async_context(self.dra)
            await self.supervisor.run(stop)
