"""Slot IDs and the preferred-allocation policy for shared RDMA devices.

Kubelet gives each device ID to one container, so a physical device is shared by advertising
N slot IDs `<ibdev>/<i>`. The policy answers GetPreferredAllocation: keep every must-include ID,
then place the rest on as few physical devices as possible, on one NUMA node when it can
(the must-include IDs' node, else a node that holds NVIDIA GPUs, else any), and among equally
good devices prefer the one with the most free slots, so consecutive containers spread over
the NICs instead of queueing on one.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from erdma.api.names import MAX_DEVICE_ID_LENGTH


def slot_id(device: str, index: int) -> str:
    return f"{device}/{index}"


def device_of(slot: str) -> str:
    """The physical device behind a slot ID (`erdma_0/17` -> `erdma_0`)."""
    return slot.rpartition("/")[0]


def slot_ids(device: str, slots: int) -> list[str]:
    """Every slot ID of a device; ValueError when the name makes IDs longer than kubelet allows."""
    longest = slot_id(device, slots - 1)
    if len(longest) > MAX_DEVICE_ID_LENGTH:
        raise ValueError(
            f"device name {device!r} gives slot IDs of {len(longest)} characters; "
            f"kubelet accepts at most {MAX_DEVICE_ID_LENGTH}"
        )
    return [slot_id(device, i) for i in range(slots)]


def _slot_index(slot: str) -> int:
    tail = slot.rpartition("/")[2]
    return int(tail) if tail.isdigit() else 0


@dataclass(frozen=True)
class Placement:
    """What the policy knows about each physical device."""

    numa: Mapping[str, int | None]  # device -> NUMA node
    gpus_per_numa: Mapping[int, int]  # NUMA node -> NVIDIA GPUs on it


def preferred(
    available: Sequence[str], must_include: Sequence[str], size: int, placement: Placement
) -> list[str]:
    chosen = list(dict.fromkeys(must_include))[:size] if size > 0 else []
    need = size - len(chosen)
    if need <= 0:
        return chosen
    taken = set(chosen)
    free: dict[str, list[str]] = defaultdict(list)
    for slot in dict.fromkeys(available):  # kubelet never repeats an ID; never answer one twice
        if slot not in taken:
            free[device_of(slot)].append(slot)
    for slots in free.values():
        slots.sort(key=_slot_index)

    used_devices = {device_of(s) for s in chosen}
    target_numa = _target_numa(used_devices, placement)

    def rank(device: str) -> tuple[int, int, int, int, str]:
        slots = len(free[device])
        return (
            0 if device in used_devices else 1,  # pack onto devices already in use
            0 if not target_numa or placement.numa.get(device) in target_numa else 1,
            0 if slots >= need else 1,  # one device that fits the rest beats several
            -slots,
            device,
        )

    for device in sorted(free, key=rank):
        take = free[device][:need]
        chosen.extend(take)
        need -= len(take)
        if need == 0:
            break
    return chosen


def _target_numa(used_devices: set[str], placement: Placement) -> set[int]:
    """NUMA nodes to prefer: the must-include IDs' node, else the nodes that hold GPUs."""
    used = Counter(n for d in used_devices if (n := placement.numa.get(d)) is not None)
    if used:
        return {used.most_common(1)[0][0]}
    return {node for node, count in placement.gpus_per_numa.items() if count > 0}
