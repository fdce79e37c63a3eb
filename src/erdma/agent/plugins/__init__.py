"""The resource plugins the agent can serve, by the name its `resources` setting lists.

Adding a resource: a module with a factory (`PluginContext` -> `NodePlugin`) and one entry
below. The agent (`erdma.agent.service`) serves whatever the registry builds and never names a
plugin; plugin modules never import the agent.
"""

from __future__ import annotations

from erdma.agent.plugins.erdma_resource import erdma_plugin
from erdma.agent.plugins.registry import NodePlugin, PluginContext, PluginFactory, PluginRegistry
from erdma.agent.plugins.shared_resources import shared_plugins
from erdma.api.names import ERDMA_RESOURCE

__all__ = ["NodePlugin", "PluginContext", "PluginFactory", "PluginRegistry", "default_registry"]


def default_registry() -> PluginRegistry:
    """The built-in plugins, in the order kubelet sees them registered."""
    registry = PluginRegistry()
    registry.register(ERDMA_RESOURCE, erdma_plugin)
    registry.register("shared", shared_plugins)
    return registry
