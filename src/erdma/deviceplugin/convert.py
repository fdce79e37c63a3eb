"""Translation between the plugin contract (plain dataclasses) and kubelet protobuf messages.

Kept in one place so plugins never import protobuf and the wire shape is tested once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.api.names import MAX_DEVICE_ID_LENGTH
from erdma.deviceplugin.plugin import HEALTHY, UNHEALTHY, ContainerAllocation, PluginDevice

log = logging.getLogger(__name__)


def valid_devices(resource: str, devices: Sequence[PluginDevice]) -> list[PluginDevice]:
    """The devices kubelet can accept; each one left out is logged with the reason.

    Empty, over-long or repeated IDs would make kubelet miscount capacity or fail
    allocations later, far from the cause.
    """
    kept: list[PluginDevice] = []
    seen: set[str] = set()
    for device in devices:
        reason = None
        if not device.id or len(device.id) > MAX_DEVICE_ID_LENGTH:
            reason = f"ID must be 1 to {MAX_DEVICE_ID_LENGTH} characters, has {len(device.id)}"
        elif device.id in seen:
            reason = "ID is listed more than once"
        if reason is not None:
            log.error(
                "device left out of the list",
                extra={"resource": resource, "device": device.id, "reason": reason},
            )
            continue
        seen.add(device.id)
        kept.append(device)
    return kept


def device_to_pb(device: PluginDevice) -> pb.Device:
    """One Device; topology stays unset when the device has no NUMA affinity."""
    message = pb.Device(ID=device.id, health=HEALTHY if device.healthy else UNHEALTHY)
    if device.numa_nodes:
        message.topology.nodes.extend(pb.NUMANode(ID=node) for node in device.numa_nodes)
    return message


def device_list_to_pb(devices: Sequence[PluginDevice]) -> pb.ListAndWatchResponse:
    return pb.ListAndWatchResponse(devices=[device_to_pb(d) for d in devices])


def allocation_to_pb(allocation: ContainerAllocation) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=allocation.envs,
        mounts=[
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in allocation.mounts
        ],
        devices=[
            pb.DeviceSpec(
                container_path=d.container_path, host_path=d.host_path, permissions=d.permissions
            )
            for d in allocation.devices
        ],
        annotations=allocation.annotations,
        cdi_devices=[pb.CDIDevice(name=name) for name in allocation.cdi_devices],
    )


def container_requests(request: pb.AllocateRequest) -> list[list[str]]:
    """The device IDs of every container request, in kubelet's order."""
    return [list(c.devices_ids) for c in request.container_requests]
