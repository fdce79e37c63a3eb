"""SMC-R in PreStartContainer (path 1) for `aliyun/erdma`: the pod's netns is found through
pod-resources and CRI, or kubelet's device checkpoint when the pod-resources socket is missing.

`erdma.agent.smcr` is imported only when the hook is built: an agent without
`prestartContainer` never loads it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from erdma.agent.config import AgentConfig
from erdma.agent.erdma import PreStartHook
from erdma.api.names import POD_RESOURCES_SOCKET
from erdma.deviceplugin.server import KUBELET_CHECKPOINT
from erdma.host.run import Runner
from erdma.host.smc import default_backend
from erdma.host.sysctl import Sysctls


def smcr_prestart(
    config: AgentConfig, runner: Runner, pnetid_of: Callable[[str], str | None]
) -> PreStartHook:
    """The hook that configures SMC-R in the pod of the devices behind the given slot IDs;
    ``pnetid_of`` tells the PNETID of the device behind a slot ID."""
    from erdma.agent.smcr import PodNetnsSteps, SmcrConfigurator

    steps = PodNetnsSteps(
        Sysctls(),
        pnet_for=lambda netns: default_backend(runner, netns),
        disable_ipv6=config.smcr_disable_ipv6,
    )
    configurator = SmcrConfigurator(
        steps,
        pod_resources_socket=config.kubelet_dir / POD_RESOURCES_SOCKET,
        runtime_socket=config.runtime_socket or None,
        host_root=config.host_root,
        # finds the pod when pod-resources is missing, so pods without SMC-R still start
        checkpoint=config.kubelet_dir / "device-plugins" / KUBELET_CHECKPOINT,
    )

    async def hook(device_ids: Sequence[str]) -> None:
        await configurator.prestart(device_ids, pnetid_of)

    return hook
