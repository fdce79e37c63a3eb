"""The `aliyun/erdma` entry: eRDMA devices as slot IDs (`erdma.agent.erdma`), with the agent's
NCCL env, allocation metrics, CDI readiness, SMC-R pre-start and health Events around it."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import Counter

from erdma.agent import startup
from erdma.agent.erdma import ErdmaPlugin, ErdmaPolicy
from erdma.agent.plugins.registry import NodePlugin, PluginContext
from erdma.agent.plugins.smcr_prestart import smcr_prestart
from erdma.deviceplugin.plugin import ContainerAllocation
from erdma.host.model import DeviceSnapshot, RdmaDevice


def erdma_plugin(context: PluginContext) -> NodePlugin:
    """The plugin, refused with a `ConfigError` when kubelet could never receive its list."""
    config = context.config
    plugin: ErdmaPlugin
    # each device's labelled counter, looked up once: `labels()` on every Allocate was a tenth
    # of the agent's CPU per call (bench/bench_allocate_cpu.py)
    counters: dict[str, Counter] = {}

    def count_allocation(devices: Sequence[RdmaDevice], allocation: ContainerAllocation) -> None:
        for device in devices:
            counter = counters.get(device.name)
            if counter is None:
                counter = context.metrics.allocations.labels(plugin.resource_name, device.name)
                counters[device.name] = counter
            counter.inc()

    def update(snapshot: DeviceSnapshot) -> None:
        plugin.update(snapshot)
        context.reports.health_changes(plugin.health)

    prestart = (
        smcr_prestart(config, context.runner, lambda slot: plugin.pnetid_of(slot))
        if config.prestart_container
        else None
    )
    plugin = ErdmaPlugin(
        ErdmaPolicy(
            mode=context.mode,
            slots_per_device=config.slots_per_device,
            allocate_all=config.allocates_all,
            exposure=context.exposed,
            device_list_strategy=config.device_list_strategy,
        ),
        extra_env=context.nccl_env,
        finish_allocation=count_allocation,
        prestart=prestart,
        cdi_ready=context.cdi_ready,
    )
    startup.refuse_never_servable(config, context.snapshot, context.exposure, plugin)
    return NodePlugin((plugin,), update, plugin.expose)
