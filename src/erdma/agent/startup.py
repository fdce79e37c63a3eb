"""What the agent settles before it serves: which devices it may expose, and whether its
configuration can be served at all.

A configuration whose `aliyun/erdma` device list kubelet could never receive (more than its
4 MiB gRPC message, e.g. 16 devices x 10,000 slots) fails at start with the limit named and the
largest ``slotsPerDevice`` that fits, instead of running and advertising nothing.
"""

from __future__ import annotations

import logging

from erdma.agent.config import AgentConfig, ConfigError
from erdma.agent.erdma import ErdmaPlugin
from erdma.agent.exposure import Exposure, by_macs, parse_rules, select
from erdma.dra import dra_owned
from erdma.host.driver import DriverMode
from erdma.host.model import DeviceSnapshot

log = logging.getLogger(__name__)


def initial_exposure(config: AgentConfig) -> Exposure:
    """Local mode picks devices by `exposedLocalERIs` (a bad entry fails at start); Regular
    mode exposes nothing until the controller's ERdmaDevice for this node is Ready."""
    if not config.local_eri_discovery:
        return by_macs((), "Regular mode: waiting for this node's ERdmaDevice to be Ready")
    exposure = select(parse_rules(config.exposed_local_eris), config.instance_id)
    log.info("local mode device selection", extra={"rule": exposure.reason})
    return exposure


def warn_loaded_mode(config: AgentConfig, snapshot: DeviceSnapshot, mode: DriverMode) -> None:
    """Warn when erdma is loaded in another mode than ``mode`` and the agent will not reload
    it: pods get what the chosen mode promises from devices that behave as loaded."""
    loaded = snapshot.modules.compat_mode
    if not config.prepare_node and loaded is not None and loaded != mode.compat_mode:
        log.warning(
            "loaded erdma does not match the chosen driver mode and prepareNode is off: "
            "pods get what the chosen mode promises but the devices behave as loaded",
            extra={"mode": mode.value, "loaded_compat_mode": loaded},
        )


def needs_instance_id(config: AgentConfig) -> bool:
    """Only `exposedLocalERIs` entries naming an instance need to know which instance this is."""
    rules = parse_rules(config.exposed_local_eris)
    return not config.instance_id and any(not r.wildcard for r in rules)


def refuse_never_servable(
    config: AgentConfig, snapshot: DeviceSnapshot, exposure: Exposure, plugin: ErdmaPlugin
) -> None:
    """Raise `ConfigError` when the devices this agent may expose could never be listed to
    kubelet: Local mode's selection, or in Regular mode every eRDMA device of the host (the
    controller's object names which later); devices the DRA driver owns are not listed."""
    found = snapshot.erdma_devices
    candidates = exposure.select(found) if config.local_eri_discovery else found
    owned = dra_owned(config.dra, snapshot.devices)
    problem = plugin.never_servable([d for d in candidates if d.name not in owned])
    if problem:
        raise ConfigError(problem)
