"""Translation between the plugin contract (plain dataclasses) and kubelet protobuf messages.

Kept in one place so plugins never import protobuf and the wire shape is tested once. The
kubelet's side of the contract lives here too: what a ListAndWatch message may hold, and what
an Allocate or GetPreferredAllocation request may ask, so every plugin gets the same checks.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from functools import lru_cache

from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.api.names import MAX_DEVICE_ID_LENGTH
from erdma.deviceplugin.plugin import (
    HEALTHY,
    UNHEALTHY,
    AllocationError,
    ContainerAllocation,
    PluginDevice,
)

log = logging.getLogger(__name__)

#: kubelet's gRPC receive limit (grpc-go's default): a larger ListAndWatch message is dropped
KUBELET_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
#: a refusal's gRPC status message travels in metadata (16 KiB at most): kept well below
MAX_REFUSAL_BYTES = 1024
#: how many bad IDs or problems a refusal names before it counts the rest
SHOWN_PROBLEMS = 5
#: NUMANode.ID is an int64 on the wire; anything wider makes protobuf raise mid-stream
_MAX_NUMA_ID = 2**63 - 1


def valid_devices(
    devices: Sequence[PluginDevice],
) -> tuple[list[PluginDevice], list[tuple[str, str]]]:
    """The devices kubelet can accept, and (ID, reason) for each one left out.

    Empty, over-long or repeated IDs would make kubelet miscount capacity or fail
    allocations later, far from the cause; a NUMA ID protobuf cannot encode would end the
    ListAndWatch stream of every device of the resource.
    """
    kept: list[PluginDevice] = []
    left_out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for device in devices:
        reason = None
        if not device.id or len(device.id) > MAX_DEVICE_ID_LENGTH:
            reason = f"ID must be 1 to {MAX_DEVICE_ID_LENGTH} characters, has {len(device.id)}"
        elif device.id in seen:
            reason = "ID is listed more than once"
        elif any(not 0 <= node <= _MAX_NUMA_ID for node in device.numa_nodes):
            reason = f"NUMA node IDs {list(device.numa_nodes)} do not fit kubelet's int64"
        if reason is not None:
            left_out.append((device.id, reason))
            continue
        seen.add(device.id)
        kept.append(device)
    return kept, left_out


def device_list_to_pb(devices: Iterable[PluginDevice]) -> pb.ListAndWatchResponse:
    """The ListAndWatch message; a Device's topology stays unset when it has no NUMA affinity.

    Each Device is built in place in the response: one built on its own has its own protobuf
    arena, which the response keeps alive once it holds the Device (1.7 MiB for 2,000 slots).
    """
    response = pb.ListAndWatchResponse()
    for device in devices:
        message = response.devices.add(
            ID=device.id, health=HEALTHY if device.healthy else UNHEALTHY
        )
        for node in device.numa_nodes:
            message.topology.nodes.add(ID=node)
    return response


def allocate_response(allocations: Iterable[ContainerAllocation]) -> pb.AllocateResponse:
    """The Allocate answer, one container response per allocation, in order.

    Built in place (``add``) and only with the fields an allocation has: a sub-message built
    on its own and then copied in, and an empty list or map passed to a constructor, each cost
    a protobuf call on every Allocate (together about half of this function's time).
    """
    response = pb.AllocateResponse()
    for allocation in allocations:
        container = response.container_responses.add()
        if allocation.envs:
            container.envs.update(allocation.envs)
        for m in allocation.mounts:
            container.mounts.add(
                container_path=m.container_path, host_path=m.host_path, read_only=m.read_only
            )
        for d in allocation.devices:
            container.devices.add(
                container_path=d.container_path, host_path=d.host_path, permissions=d.permissions
            )
        if allocation.annotations:
            container.annotations.update(allocation.annotations)
        for name in allocation.cdi_devices:
            container.cdi_devices.add(name=name)
    return response


def container_requests(request: pb.AllocateRequest) -> list[list[str]]:
    """The device IDs of every container request, in kubelet's order."""
    return [list(c.devices_ids) for c in request.container_requests]


def list_message_size(devices: Iterable[PluginDevice]) -> int:
    """The exact encoded size of the ListAndWatch message for `devices`, without building it.

    A Device's size depends only on its ID length, health and NUMA nodes, so 160,000 slot IDs
    cost a dictionary lookup each rather than a protobuf object each.
    """
    return sum(_device_field_size(len(d.id.encode()), d.healthy, d.numa_nodes) for d in devices)


@lru_cache(maxsize=4096)
def _device_field_size(id_bytes: int, healthy: bool, numa_nodes: tuple[int, ...]) -> int:
    """A one-Device message is exactly that Device's field: tag, length and body."""
    return device_list_to_pb([PluginDevice("x" * id_bytes, healthy, numa_nodes)]).ByteSize()


# -- what kubelet may ask -----------------------------------------------------------------------


def describe_ids(devices: Sequence[PluginDevice], limit: int = 8) -> str:
    """A short account of an advertised list for error messages: `erdma_0/* (200), ...`."""
    if not devices:
        return "no devices"
    groups: dict[str, int] = {}
    for device in devices:
        prefix, slash, _ = device.id.rpartition("/")
        key = f"{prefix}/*" if slash else device.id
        groups[key] = groups.get(key, 0) + 1
    shown = [f"{key} ({count})" if count > 1 else key for key, count in groups.items()]
    more = f" and {len(shown) - limit} more" if len(shown) > limit else ""
    unhealthy = sum(not d.healthy for d in devices)
    return f"{len(devices)} IDs ({unhealthy} Unhealthy): {', '.join(shown[:limit])}{more}"


def check_allocate(
    resource: str,
    wanted: Sequence[Sequence[str]],
    health: Mapping[str, bool],
    advertised: Sequence[PluginDevice],
) -> None:
    """Refuse an Allocate that kubelet could not have built from what was advertised.

    Kubelet hands out only Healthy IDs it received, each to one container; anything else is a
    stale or broken caller, and answering it would give some device to a pod nobody counted.
    `health` is `advertised` indexed by ID ({ID: healthy}); `advertised` names it in errors.
    """
    problems: list[str] = []
    seen: set[str] = set()
    for ids in wanted:
        for device_id in ids:
            if device_id in seen:
                problems.append(f"{device_id!r} is requested more than once")
            elif not health.get(device_id, False):
                why = "was never advertised" if device_id not in health else f"is {UNHEALTHY}"
                problems.append(f"{device_id!r} {why}")
            seen.add(device_id)
    if problems:
        raise AllocationError(
            f"{resource}: refusing Allocate: {summarize(problems)}; "
            f"advertised: {describe_ids(advertised)}"
        )


def summarize(problems: Sequence[str]) -> str:
    """The first `SHOWN_PROBLEMS` distinct problems and how many more there are.

    A refusal reaches kubelet as the gRPC status message, which travels in metadata: a request
    naming thousands of bad IDs would exceed gRPC's 16 KiB metadata limit, and kubelet would see
    RESOURCE_EXHAUSTED instead of the reason. This keeps a refusal under `MAX_REFUSAL_BYTES`.
    """
    unique = list(dict.fromkeys(problems))
    more = len(unique) - SHOWN_PROBLEMS
    return "; ".join(unique[:SHOWN_PROBLEMS]) + (f"; and {more} more" if more > 0 else "")


def _ids(ids: Sequence[str]) -> str:
    """`['a/1', 'a/2']`, or the first `SHOWN_PROBLEMS` of a long list and a count."""
    more = len(ids) - SHOWN_PROBLEMS
    return f"{list(ids[:SHOWN_PROBLEMS])}" + (f" and {more} more" if more > 0 else "")


def check_preferred(
    resource: str,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    advertised: Collection[str],
) -> None:
    """Refuse a GetPreferredAllocation no answer can satisfy (IDs already de-duplicated).

    An answer holds only IDs that are both in ``available`` and ``advertised``: an ID this
    plugin never listed is no device of its own, whoever asks for it.
    """
    problem = None
    offered = set(available)
    usable = [i for i in available if i in advertised]
    if size < 0:
        problem = f"allocation_size {size} is negative"
    elif missing := [i for i in must_include if i not in offered]:
        problem = f"must-include IDs {_ids(missing)} are not among the available IDs"
    elif unknown := [i for i in must_include if i not in advertised]:
        problem = f"must-include IDs {_ids(unknown)} were never advertised"
    elif size > len(usable):
        problem = (
            f"allocation_size {size} is more than the {len(usable)} available IDs "
            f"this plugin advertised (of {len(available)} available)"
        )
    elif len(must_include) > size:
        problem = f"{len(must_include)} must-include IDs do not fit allocation_size {size}"
    if problem is not None:
        raise AllocationError(f"{resource}: refusing GetPreferredAllocation: {problem}")


def settle_preferred(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    picks: Sequence[str],
    known: Collection[str],
    advertised: Collection[str],
) -> list[str]:
    """Exactly `size` distinct advertised IDs from `available`, every must-include first.

    The plugin's picks come next in its order, then the rest of `available`; IDs in `known`
    (advertised Healthy) go before any other, so an Unhealthy one is used only when kubelet left
    nothing else, and one never `advertised` never is (`check_preferred` made sure enough are).
    A plugin bug thus costs a worse placement, never a broken contract.
    """
    offered = {i for i in available if i in advertised}
    chosen = dict.fromkeys(must_include)
    ranked = [i for i in [*picks, *available] if i in offered]
    for device_id in [i for i in ranked if i in known] + ranked:
        if len(chosen) >= size:
            break
        chosen.setdefault(device_id)
    return list(chosen)
