"""The plugin registry: which resource plugins exist, and which of them a configuration enables.

As NVIDIA's k8s-device-plugin does in `GetPlugins`, the agent never names a plugin: it asks the
registry for the ones its `resources` setting lists, in registration order (the order kubelet
sees them registered and /readyz lists them). A factory turns the `PluginContext` the agent
offers into one `NodePlugin`; the agent serves its servicers and hands it every new snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from erdma.agent.config import AgentConfig
from erdma.agent.config_file import ConfigError
from erdma.agent.exposure import Exposure
from erdma.deviceplugin.plugin import ResourcePlugin
from erdma.host.model import DeviceSnapshot, RdmaDevice

if TYPE_CHECKING:
    from erdma.agent.metrics import AgentMetrics
    from erdma.agent.reports import DeviceReports
    from erdma.host.driver import DriverMode
    from erdma.host.run import Runner

#: the configuration key whose values name plugins
RESOURCES_KEY = "resources"


def _ignore_exposure(exposure: Exposure) -> None:
    """The `NodePlugin.expose` of a plugin whose devices do not depend on the ERIs exposed."""


@dataclass(frozen=True)
class NodePlugin:
    """One entry of `resources`, the one interface the agent knows a plugin by.

    ``servicers``: what the device-plugin framework serves to kubelet, one per resource (the
    `shared` entry serves each of `sharedResources`). ``update``: takes each new host snapshot,
    already without the devices the DRA driver owns. ``expose``: told when Local or Regular
    mode changes which ERIs the node exposes.
    """

    servicers: tuple[ResourcePlugin, ...]
    update: Callable[[DeviceSnapshot], object]
    expose: Callable[[Exposure], None] = field(default=_ignore_exposure)

    @property
    def resource_names(self) -> tuple[str, ...]:
        return tuple(s.resource_name for s in self.servicers)


@dataclass(frozen=True)
class PluginContext:
    """What the agent offers a factory: its settings, the first scan and driver mode, and the
    agent's own services, so a plugin module never reaches back into the agent."""

    config: AgentConfig
    snapshot: DeviceSnapshot
    mode: DriverMode
    #: Local mode's `exposedLocalERIs` rule (Regular mode: every device, by MAC later)
    exposure: Exposure
    #: what is exposed until Local or Regular mode decides (`NodePlugin.expose` follows)
    exposed: Exposure
    runner: Runner
    metrics: AgentMetrics
    reports: DeviceReports
    nccl_env: Callable[[Sequence[RdmaDevice]], dict[str, str]]
    #: whether the node's CDI spec names the current devices
    cdi_ready: Callable[[], bool]


PluginFactory = Callable[[PluginContext], NodePlugin]


class PluginRegistry:
    """Plugin factories by the name `resources` lists; a module adds its own with `register`."""

    def __init__(self) -> None:
        self._factories: dict[str, PluginFactory] = {}

    def register(self, name: str, factory: PluginFactory) -> None:
        if name in self._factories:
            raise ValueError(f"plugin {name!r} is registered twice")
        self._factories[name] = factory

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._factories)

    def select(self, enabled: Sequence[str]) -> list[PluginFactory]:
        """The factories of the ``enabled`` names, in registration order; an unknown name is a
        `ConfigError` naming the key, the value and the accepted names."""
        unknown = [name for name in enabled if name not in self._factories]
        if unknown:
            raise ConfigError(
                f"{RESOURCES_KEY}: unknown plugin {unknown[0]!r}; accepted: {', '.join(self.names)}"
            )
        return [factory for name, factory in self._factories.items() if name in enabled]

    def build(self, enabled: Sequence[str], context: PluginContext) -> list[NodePlugin]:
        return [factory(context) for factory in self.select(enabled)]
