"""The `shared` entry: one `SharedPlugin` per `sharedResources` item (`rdma/hca` by default).

Two items selecting the same device would hand it out twice: that refuses the start, and a
device hot-added under two selectors later is logged once per overlap (each item keeps serving
what it selects).
"""

from __future__ import annotations

import logging

from erdma.agent.plugins.registry import NodePlugin, PluginContext
from erdma.agent.shared import SharedPlugin, check_disjoint
from erdma.host.model import DeviceSnapshot

log = logging.getLogger(__name__)


def shared_plugins(context: PluginContext) -> NodePlugin:
    config = context.config
    plugins = tuple(
        SharedPlugin(
            resource, host_root=config.host_root, non_host_network_rdma=config.non_host_network_rdma
        )
        for resource in config.shared_resources
    )
    selections = [p.config for p in plugins]
    check_disjoint(context.snapshot, selections)
    overlap = ""

    def update(snapshot: DeviceSnapshot) -> None:
        nonlocal overlap
        try:
            check_disjoint(snapshot, selections)
            overlap = ""
        except ValueError as exc:
            if str(exc) != overlap:
                reason = {"reason": str(exc)}
                log.error("shared resources overlap; fix sharedResources[].selectors", extra=reason)
            overlap = str(exc)
        for plugin in plugins:
            plugin.update(snapshot)

    return NodePlugin(plugins, update)
