"""A third resource, `example.com/toy`, defined by the tests alone: one plugin module whose
factory the test registers, to show that a resource needs no change to the agent.

It lists one ID per RDMA device of the snapshot (`toy-<device>`, healthy while its port is
ACTIVE) and answers Allocate with the devices named in `TOY_DEVICES`.
"""

from __future__ import annotations

from collections.abc import Sequence

from erdma.agent.plugins import NodePlugin, PluginContext
from erdma.deviceplugin import AllocationError, ContainerAllocation, PluginDevice, ResourcePlugin
from erdma.host.model import DeviceSnapshot

TOY_RESOURCE = "example.com/toy"


class ToyPlugin(ResourcePlugin):
    resource_name = TOY_RESOURCE
    socket_stem = "toy"

    def __init__(self) -> None:
        self._list: tuple[PluginDevice, ...] = ()

    def update(self, snapshot: DeviceSnapshot) -> None:
        listed = tuple(PluginDevice(f"toy-{d.name}", d.active) for d in snapshot.devices)
        if listed != self._list:
            self._list = listed
            self.notify_changed()

    def devices(self) -> Sequence[PluginDevice]:
        return self._list

    def allocate(self, container_requests: Sequence[Sequence[str]]) -> list[ContainerAllocation]:
        known = {d.id for d in self._list}
        allocations = []
        for ids in container_requests:
            if unknown := [i for i in ids if i not in known]:
                raise AllocationError(f"unknown {TOY_RESOURCE} IDs {unknown}")
            names = ",".join(i.removeprefix("toy-") for i in ids)
            allocations.append(ContainerAllocation(envs={"TOY_DEVICES": names}))
        return allocations


def toy_plugin(context: PluginContext) -> NodePlugin:
    """The registry entry's factory: the toy needs nothing of the context."""
    plugin = ToyPlugin()
    return NodePlugin((plugin,), plugin.update)
