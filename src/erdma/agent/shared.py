"""Shared RDMA resources such as `rdma/hca: 1k` for Lingjun-style nodes.

A shared resource advertises `capacity` slots (1000 shows as `1k`) and every container that
holds one slot gets every char device of every selected HCA plus `rdma_cm`: one `rdma/hca: 1`
is enough for a pod. Slots are Healthy while some selected HCA has an ACTIVE port and every
required char device exists; with non-hostNetwork RDMA switched on they also need the
precondition that makes it work (a global IPv6 address on the RDMA netdevs and the RDMA
subsystem in shared netns mode), so kubelet never hands out devices that cannot work.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Sequence
from pathlib import Path

from erdma.agent.shared_config import SharedResourceConfig, SharedSelectors
from erdma.deviceplugin.plugin import (
    AllocationError,
    ContainerAllocation,
    DeviceNode,
    PluginDevice,
    ResourcePlugin,
)
from erdma.host.ipv6 import global_ipv6_netdevs
from erdma.host.model import DeviceSnapshot, RdmaDevice

log = logging.getLogger(__name__)


def _hex_id(value: str) -> int:
    return int(value.lower().removeprefix("0x"), 16)


def matches(device: RdmaDevice, selectors: SharedSelectors) -> bool:
    """True when the device passes every selector list that is set (an empty list passes)."""
    checks = (
        (selectors.ibdev_names, lambda p: fnmatch.fnmatchcase(device.name, p)),
        (selectors.drivers, lambda d: device.driver == d),
        (selectors.vendors, lambda v: device.vendor_id == _hex_id(v)),
        (selectors.device_ids, lambda d: device.device_id == _hex_id(d)),
        (selectors.netdev_names, lambda p: fnmatch.fnmatchcase(device.netdev or "", p)),
    )
    return all(any(test(value) for value in values) for values, test in checks if values)


def check_disjoint(snapshot: DeviceSnapshot, resources: Sequence[SharedResourceConfig]) -> None:
    """A device selected by two resources would be handed out twice: refuse with names."""
    owners: dict[str, str] = {}
    for resource in resources:
        for device in snapshot.devices:
            if matches(device, resource.selectors):
                if device.name in owners:
                    raise ValueError(
                        f"device {device.name} is selected by both {owners[device.name]} and "
                        f"{resource.name}; narrow sharedResources[].selectors so each device "
                        "belongs to one resource"
                    )
                owners[device.name] = resource.name


class SharedPlugin(ResourcePlugin):
    preferred_allocation_available = False

    def __init__(
        self,
        config: SharedResourceConfig,
        *,
        host_root: Path,
        non_host_network_rdma: bool = False,
    ) -> None:
        self.config = config
        self.resource_name = config.name
        self.socket_stem = config.name.rpartition("/")[2].replace("-", "_")
        self.host_root = host_root
        self.non_host_network_rdma = non_host_network_rdma
        self._slot_prefix = self.socket_stem
        self._hcas: tuple[RdmaDevice, ...] = ()
        self._rdma_cm: str | None = None
        self._list: tuple[PluginDevice, ...] = ()
        self._reason = ""

    def update(self, snapshot: DeviceSnapshot) -> bool:
        hcas = tuple(d for d in snapshot.devices if matches(d, self.config.selectors))
        healthy, reason = self._health(snapshot, hcas)
        if reason != self._reason:
            level = logging.INFO if healthy else logging.WARNING
            log.log(
                level,
                f"{self.resource_name} {'Healthy' if healthy else 'Unhealthy'}",
                extra={
                    "resource": self.resource_name,
                    "reason": reason,
                    "hcas": [d.name for d in hcas],
                },
            )
        self._hcas, self._reason = hcas, reason
        cm = snapshot.rdma_cm
        self._rdma_cm = cm.path if cm is not None and cm.present else None
        numa = tuple(sorted({d.numa_node for d in hcas if d.numa_node is not None}))
        new_list = tuple(
            PluginDevice(f"{self._slot_prefix}-{i}", healthy, numa)
            for i in range(self.config.capacity)
        )
        if new_list == self._list:
            return False
        self._list = new_list
        self.notify_changed()
        return True

    def _health(self, snapshot: DeviceSnapshot, hcas: Sequence[RdmaDevice]) -> tuple[bool, str]:
        if not hcas:
            return False, "no RDMA device matches the selectors"
        required = set(self.config.required_char_devices)
        if "rdma_cm" in required and (snapshot.rdma_cm is None or not snapshot.rdma_cm.present):
            return False, "required /dev/infiniband/rdma_cm is missing"
        for device in hcas:
            wanted = [device.uverbs] if "uverbs" in required else []
            for kind, nodes in (("umad", device.umad), ("issm", device.issm)):
                if kind in required:
                    if not nodes:
                        return False, f"{device.name} has no {kind} device, which is required"
                    wanted.extend(nodes)
            missing = [c.path for c in wanted if not c.present]
            if missing:
                return False, f"{device.name}: missing {', '.join(missing)}"
        if not any(d.active for d in hcas):
            return False, "no selected HCA has an ACTIVE port"
        if self.non_host_network_rdma:
            return self._non_host_network_ready(snapshot, hcas)
        return True, f"{len(hcas)} HCA(s) ready"

    def _non_host_network_ready(
        self, snapshot: DeviceSnapshot, hcas: Sequence[RdmaDevice]
    ) -> tuple[bool, str]:
        if snapshot.modules.netns_shared is False:
            return False, (
                "non-hostNetwork RDMA needs the RDMA subsystem in shared netns mode "
                "(ib_core netns_mode=Y); it is exclusive on this node"
            )
        with_ipv6 = global_ipv6_netdevs(self.host_root)
        lacking = sorted(d.netdev or d.name for d in hcas if d.netdev not in with_ipv6)
        if lacking:
            return False, (
                "non-hostNetwork RDMA needs a global IPv6 address on every RDMA netdev "
                f"(an IPv6 compute network); none on {', '.join(lacking)}"
            )
        return True, f"{len(hcas)} HCA(s) ready for non-hostNetwork pods"

    def advertised(self) -> bool:
        """Registered only on a node where some HCA matches the selectors."""
        return bool(self._hcas)

    @property
    def health_reason(self) -> str:
        """Why the slots are Healthy or Unhealthy right now (also logged on every change)."""
        return self._reason

    def devices(self) -> Sequence[PluginDevice]:
        return self._list

    def allocate(self, container_requests: Sequence[Sequence[str]]) -> list[ContainerAllocation]:
        known = {d.id for d in self._list}
        allocations = []
        for ids in container_requests:
            unknown = [i for i in ids if i not in known]
            if unknown:
                raise AllocationError(
                    f"unknown {self.resource_name} device IDs {unknown}; this node advertises "
                    f"{self._slot_prefix}-0 .. {self._slot_prefix}-{len(known) - 1}"
                )
            allocations.append(self._allocation() if ids else ContainerAllocation())
        return allocations

    def _allocation(self) -> ContainerAllocation:
        allocation = ContainerAllocation()
        for device in self._hcas:
            for char in device.char_devices:
                if char.present:
                    allocation.devices.append(DeviceNode(char.path, char.path))
        if self._rdma_cm is not None:
            allocation.devices.append(DeviceNode(self._rdma_cm, self._rdma_cm))
        if self._hcas:
            allocation.envs["RDMA_DEVICES"] = ",".join(d.name for d in self._hcas)
        return allocation
