"""`resources` naming a plugin no module registered is refused before the agent starts, with
the key, the value and the accepted names; known plugins come in registration order."""

from __future__ import annotations

import re

import pytest

from erdma.agent.config import ConfigError, build_config
from erdma.agent.plugins import NodePlugin, PluginContext, PluginRegistry
from erdma.agent.service import Agent


def test_an_unknown_plugin_is_refused_naming_key_value_and_accepted_names() -> None:
    config = build_config(environ={}, flags={})
    config = config.model_copy(update={"resources": ["aliyun/erdma", "example.com/nope"]})
    expected = "resources: unknown plugin 'example.com/nope'; accepted: aliyun/erdma, shared"
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}$"):
        Agent(config)


def nothing(context: PluginContext) -> NodePlugin:
    return NodePlugin((), lambda snapshot: None)


def also_nothing(context: PluginContext) -> NodePlugin:
    return NodePlugin((), lambda snapshot: None)


def test_plugins_come_in_registration_order_whatever_the_config_order() -> None:
    registry = PluginRegistry()
    registry.register("example.com/first", nothing)
    registry.register("example.com/second", also_nothing)
    assert registry.select(["example.com/second", "example.com/first"]) == [nothing, also_nothing]
    assert registry.select(["example.com/second"]) == [also_nothing]


def test_a_name_registered_twice_is_refused() -> None:
    registry = PluginRegistry()
    registry.register("example.com/toy", nothing)
    with pytest.raises(ValueError, match=r"plugin 'example\.com/toy' is registered twice"):
        registry.register("example.com/toy", nothing)
