"""Kubelet device-plugin framework: sockets, registration, streams, kubelet restarts.

It knows nothing about eRDMA: resource policy lives in `ResourcePlugin` subclasses, which a
`PluginManager` serves (one socket each) and keeps registered across kubelet restarts.
"""

from erdma.deviceplugin.lifecycle import Timing
from erdma.deviceplugin.manager import PluginManager
from erdma.deviceplugin.plugin import (
    AllocationError,
    ContainerAllocation,
    DeviceNode,
    Mount,
    PluginDevice,
    ResourcePlugin,
)

__all__ = [
    "AllocationError",
    "ContainerAllocation",
    "DeviceNode",
    "Mount",
    "PluginDevice",
    "PluginManager",
    "ResourcePlugin",
    "Timing",
]
