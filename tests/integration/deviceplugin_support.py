"""The toy plugin and helpers the device-plugin framework tests share."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry

from erdma.deviceplugin.manager import PluginManager
from erdma.deviceplugin.plugin import (
    AllocationError,
    ContainerAllocation,
    DeviceNode,
    PluginDevice,
    ResourcePlugin,
)
from erdma.sim.kubelet import FakeKubelet

TOY = "example.com/toy"


class ToyPlugin(ResourcePlugin):
    """A resource of named toy devices; allocation hands out one /dev node per ID."""

    def __init__(
        self,
        ids: Sequence[str] = ("t0", "t1"),
        *,
        resource_name: str = TOY,
        stem: str = "toy",
        pre_start: bool = False,
    ) -> None:
        self.resource_name = resource_name
        self.socket_stem = stem
        self.pre_start_required = pre_start
        self.preferred_allocation_available = True
        self.current = [PluginDevice(i) for i in ids]
        self.prestarted: list[list[str]] = []
        self.prestart_error: str | None = None

    def devices(self) -> Sequence[PluginDevice]:
        return list(self.current)

    def set_devices(self, devices: Sequence[PluginDevice]) -> None:
        self.current = list(devices)
        self.notify_changed()

    def allocate(self, container_requests: Sequence[Sequence[str]]) -> list[ContainerAllocation]:
        known = {d.id for d in self.current}
        for ids in container_requests:
            unknown = [i for i in ids if i not in known]
            if unknown:
                raise AllocationError(f"unknown toy devices {unknown}")
            if "boom" in ids:
                raise RuntimeError("driver exploded")
        return [
            ContainerAllocation(
                envs={"TOY_DEVICES": ",".join(ids)},
                devices=[DeviceNode(f"/dev/toy/{i}", f"/dev/toy/{i}") for i in ids],
                cdi_devices=[f"example.com/toy={i}" for i in ids],
            )
            for ids in container_requests
        ]

    async def pre_start(self, device_ids: Sequence[str]) -> None:
        if self.prestart_error:
            raise RuntimeError(self.prestart_error)
        self.prestarted.append(list(device_ids))


def manager_for(kubelet_root: Path, *plugins: ResourcePlugin, **kwargs) -> PluginManager:
    kwargs.setdefault("registry", CollectorRegistry())
    return PluginManager(list(plugins), kubelet_root=kubelet_root, **kwargs)


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def until_listed(kubelet: FakeKubelet, expected: dict[str, str], timeout: float = 30.0):
    await kubelet.wait_for(lambda: kubelet.latest(TOY) == expected, timeout, f"list {expected}")
