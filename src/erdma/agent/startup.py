"""What the agent settles before it serves: which devices it may expose, and whether its
configuration can be served at all.

A configuration whose `aliyun/erdma` device list kubelet could never receive (more than its
4 MiB gRPC message, e.g. 16 devices x 10,000 slots) fails at start with the limit named and the
largest ``slotsPerDevice`` that fits, instead of running and advertising nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path

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


def check_startup(config: AgentConfig) -> None:
    """What the model cannot know: paths on this node that must be of the right kind before
    anything starts (a host root or kubeconfig that is missing, a kubelet dir that is a file)."""
    problems = []
    existing = next(
        (p for p in (config.kubelet_dir, *config.kubelet_dir.parents) if p.exists()), None
    )
    if existing is not None and not existing.is_dir():
        where = "is" if existing == config.kubelet_dir else f"is under {existing}, which is"
        problems.append(
            f"kubeletDir (--kubelet-dir)={str(config.kubelet_dir)!r}: {where} a file, not a "
            "directory; use kubelet's root directory such as /var/lib/kubelet"
        )
    if not config.host_root.is_dir():
        why = "is not a directory" if config.host_root.exists() else "no such directory"
        problems.append(
            f"hostRoot (--host-root)={str(config.host_root)!r}: {why}; give the directory "
            "where the host's /sys, /dev and /proc are (/ on the node, /host in a pod)"
        )
    if config.kubeconfig and not Path(config.kubeconfig).is_file():
        why = "is not a file" if Path(config.kubeconfig).exists() else "no such file"
        problems.append(
            f"kubeconfig (--kubeconfig)={config.kubeconfig!r}: {why}; give an existing "
            "kubeconfig or leave it empty for in-cluster access"
        )
    if problems:
        raise ConfigError("invalid agent configuration: " + "; ".join(problems))
