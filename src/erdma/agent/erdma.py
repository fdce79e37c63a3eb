"""The `aliyun/erdma` resource: eRDMA devices shared through slot IDs.

Each exposed eRDMA device is advertised as N slots (`erdma_0/0` ... `erdma_0/199`) with its NUMA
node. Allocate answers every container in order with the uverbs node of each physical device
behind its slots (plus `rdma_cm` in `default` mode when the host has it), and env that names
what was given: `SMCR_PNET` (compatible with the reference) and `ERDMA_DEVICES`.
Allocate does no I/O: it reads the latest snapshot, which the agent's rescan loop publishes.
A list too large for kubelet's 4 MiB gRPC limit (many devices x many slots) is refused as a
whole with one error naming the size and `slotsPerDevice`: a truncated list would hide devices
without a word, and an oversized one reaches kubelet as nothing at all.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from erdma.agent.allocation import Placement, device_of, preferred, slot_ids
from erdma.agent.exposure import Exposure
from erdma.agent.health import device_health
from erdma.api.names import ERDMA_RESOURCE
from erdma.cdi import DeviceListStrategy, cdi_annotations, cdi_device_names, device_env
from erdma.deviceplugin.convert import KUBELET_MAX_MESSAGE_BYTES, list_message_size
from erdma.deviceplugin.plugin import (
    AllocationError,
    ContainerAllocation,
    DeviceNode,
    PluginDevice,
    ResourcePlugin,
)
from erdma.host.health import Health
from erdma.host.model import DeviceSnapshot, ModuleState, RdmaDevice

log = logging.getLogger(__name__)

PreStartHook = Callable[[Sequence[str]], Awaitable[None]]
EnvHook = Callable[[Sequence[RdmaDevice]], dict[str, str]]
AllocationHook = Callable[[Sequence[RdmaDevice], ContainerAllocation], None]
EMPTY_SNAPSHOT = DeviceSnapshot(
    devices=(),
    skipped=(),
    rdma_cm=None,
    modules=ModuleState(erdma_loaded=False, compat_mode=None, netns_shared=None, smc_loaded=False),
)


@dataclass(frozen=True)
class ErdmaPolicy:
    """How devices are exposed and handed out (from the agent configuration)."""

    mode: str = "default"  # driver mode: default | compat | ofed
    slots_per_device: int = 200
    allocate_all: bool = False
    exposure: Exposure = field(default_factory=lambda: Exposure(None, "all devices"))
    device_list_strategy: DeviceListStrategy = DeviceListStrategy.DEVICE_SPECS


@dataclass(frozen=True)
class _Answer:
    """Allocate's answer for one set of devices, kept until a scan finds them changed."""

    devices: tuple[RdmaDevice, ...]
    allocation: ContainerAllocation


class ErdmaPlugin(ResourcePlugin):
    resource_name = ERDMA_RESOURCE
    socket_stem = "erdma"
    preferred_allocation_available = True
    answers_kept = True  # `_answers`: a changed answer is a new object

    def __init__(
        self,
        policy: ErdmaPolicy,
        *,
        extra_env: EnvHook | None = None,
        finish_allocation: AllocationHook | None = None,
        prestart: PreStartHook | None = None,
        cdi_ready: Callable[[], bool] = lambda: True,
    ) -> None:
        """``cdi_ready``: whether the node's CDI spec names the current devices; until it
        does, a CDI strategy answers with device specs (see erdma.agent.cdi_spec)."""
        self.policy = policy
        self.cdi_ready = cdi_ready
        self.pre_start_required = prestart is not None
        self._extra_env = extra_env
        self._finish = finish_allocation
        self._prestart = prestart
        self._snapshot = EMPTY_SNAPSHOT
        self._exposed: dict[str, RdmaDevice] = {}
        self._health: dict[str, Health] = {}
        self._list: tuple[PluginDevice, ...] = ()
        # {advertised slot ID: its device's name}: Allocate's one look-up per ID both checks the
        # ID and finds its device (the names are `_exposed`'s own strings, not 3,000 copies)
        self._owners: dict[str, str] = {}
        self._notes: dict[str, tuple[str, ...]] = {}
        self._refusal = ""
        self._unlisted: dict[str, str] = {}  # device -> why it is not advertised
        self._list_key: tuple[object, ...] | None = None  # what `_list` was built from
        # Allocate's answer for each (devices, CDI fallback) while the exposed devices and rdma_cm
        # stay as they are: it follows from them and the settings alone, and building it (env,
        # NCCL variables, device nodes) was a third of the agent's CPU per Allocate
        # (bench/bench_allocate_cpu.py).
        self._answers: dict[tuple[tuple[str, ...], bool], _Answer] = {}
        self._answers_from: tuple[object, ...] = ()  # the devices and rdma_cm they were made of

    # -- device list ---------------------------------------------------------------------
    def update(self, snapshot: DeviceSnapshot) -> bool:
        """Adopt a new scan; tells the framework (and so kubelet) only when the list changed."""
        self._snapshot = snapshot
        chosen = self.policy.exposure.select(snapshot.erdma_devices)
        exposed = {dev.name: dev for dev in chosen}
        answers_from = (*exposed.values(), snapshot.rdma_cm)
        if answers_from != self._answers_from:  # a rescan every 0.5 s mostly finds them equal
            self._answers, self._answers_from = {}, answers_from
        health = {name: device_health(dev) for name, dev in exposed.items()}
        self._log_changes(exposed, health)
        self._exposed, self._health = exposed, health
        # A rescan that changed none of what the list is made of skips rebuilding it: with
        # 2 devices x 1,000 slots that is 2,000 objects every rescan interval, for nothing.
        key = (
            self.policy.slots_per_device,
            *((n, health[n].healthy, exposed[n].numa_node) for n in sorted(exposed)),
        )
        if key == self._list_key:
            return False
        self._list_key = key
        new_list = self._within_limit(self._build_list())
        if new_list == self._list:
            return False
        names = {name: name for name in self._exposed}
        self._list, self._owners = new_list, {d.id: names[device_of(d.id)] for d in new_list}
        self.notify_changed()
        return True

    def _within_limit(self, devices: list[PluginDevice]) -> tuple[PluginDevice, ...]:
        """The list, or nothing when kubelet could not receive it (logged once per change)."""
        refusal = _too_large(self.resource_name, devices, len(self._exposed), self.policy)
        if refusal and refusal != self._refusal:
            log.error(f"{self.resource_name}: advertising no devices: {refusal}")
        self._refusal = refusal
        return () if refusal else tuple(devices)

    def never_servable(self, devices: Sequence[RdmaDevice]) -> str:
        """Why kubelet could never receive the list of ``devices`` (all healthy, as many slots
        as configured), or "": the agent refuses such a configuration at start."""
        listed: list[PluginDevice] = []
        for device in devices:
            with contextlib.suppress(ValueError):  # a name too long is never listed anyway
                ids = slot_ids(device.name, self.policy.slots_per_device)
                numa = () if device.numa_node is None else (device.numa_node,)
                listed.extend(PluginDevice(i, True, numa) for i in ids)
        return _too_large(self.resource_name, listed, len(devices), self.policy)

    def _build_list(self) -> list[PluginDevice]:
        devices: list[PluginDevice] = []
        unlisted: dict[str, str] = {}
        for name, device in sorted(self._exposed.items()):
            try:
                ids = slot_ids(name, self.policy.slots_per_device)
            except ValueError as exc:
                unlisted[name] = str(exc)
                if self._unlisted.get(name) != str(exc):  # once per change, not every rescan
                    log.warning("device not advertised", extra={"device": name, "reason": str(exc)})
                continue
            healthy = self._health[name].healthy
            numa = () if device.numa_node is None else (device.numa_node,)
            devices.extend(PluginDevice(i, healthy, numa) for i in ids)
        self._unlisted = unlisted
        return devices

    def _log_changes(self, exposed: dict[str, RdmaDevice], health: dict[str, Health]) -> None:
        for name in sorted(set(exposed) | set(self._exposed)):
            before, after = self._health.get(name), health.get(name)
            if after is None:
                log.warning("device gone", extra={"device": name})
            elif before is None or before.healthy != after.healthy:
                state = "Healthy" if after.healthy else "Unhealthy"
                log.info(
                    f"device {state}",
                    extra={"device": name, "code": after.code.value, "reason": after.message},
                )
        notes = {name: dev.notes for name, dev in exposed.items()}
        for name, found in sorted(notes.items()):
            if found and found != self._notes.get(name):  # once per change, not every rescan
                log.warning("device data partly ignored", extra={"device": name, "notes": found})
        self._notes = notes

    def devices(self) -> Sequence[PluginDevice]:
        return self._list

    @property
    def health(self) -> dict[str, Health]:
        """The health of each exposed device, as of the last update."""
        return dict(self._health)

    def expose(self, exposure: Exposure) -> None:
        """Change which devices are exposed (Regular mode: once the ERIs are Ready)."""
        self.policy = replace(self.policy, exposure=exposure)
        self.update(self._snapshot)

    # -- allocation ----------------------------------------------------------------------
    def allocate(self, container_requests: Sequence[Sequence[str]]) -> list[ContainerAllocation]:
        return list(map(self._allocate_one, container_requests))

    def _allocate_one(self, ids: Sequence[str]) -> ContainerAllocation:
        if self.policy.allocate_all:
            names = tuple(sorted(self._exposed))
        else:
            owners = self._owners  # the exact advertised slot IDs
            try:  # map, not a comprehension: no frame of its own on every Allocate
                names = tuple(sorted(set(map(owners.__getitem__, ids))))
            except KeyError:
                unknown = [i for i in ids if i not in owners]
                raise AllocationError(
                    f"unknown {ERDMA_RESOURCE} device IDs {unknown}; this node advertises "
                    f"slots 0-{self.policy.slots_per_device - 1} of "
                    f"{sorted(self._exposed) if owners else 'no devices'}"
                ) from None
        # a CDI strategy answers with device specs while the spec is not current: CDI names
        # the runtime cannot resolve yet. Keyed on that, not on the strategy: an Enum hashes
        # in Python, on every call.
        specs = DeviceListStrategy.DEVICE_SPECS
        fallback = self.policy.device_list_strategy is not specs and not self.cdi_ready()
        answer = self._answers.get((names, fallback))
        if answer is None:
            strategy = specs if fallback else self.policy.device_list_strategy
            answer = self._answers[names, fallback] = self._answer(names, strategy)
        if answer.devices and self._finish is not None:
            self._finish(answer.devices, answer.allocation)
        return answer.allocation

    def _answer(self, names: tuple[str, ...], strategy: DeviceListStrategy) -> _Answer:
        """What a container asking for the devices ``names`` gets (nothing asks to change it
        afterwards: the framework only reads an allocation to encode it)."""
        devices = tuple(self._exposed[n] for n in names)
        allocation = ContainerAllocation()
        if strategy is DeviceListStrategy.CDI_DEVICES:
            allocation.cdi_devices = cdi_device_names(devices)
        elif strategy is DeviceListStrategy.CDI_ANNOTATIONS:
            allocation.annotations.update(cdi_annotations(devices))
        else:
            allocation.devices = self._device_nodes(devices)
        if devices:
            allocation.envs.update(device_env(devices))
            if self._extra_env is not None:
                allocation.envs.update(self._extra_env(devices))
        return _Answer(devices, allocation)

    def _device_nodes(self, devices: Sequence[RdmaDevice]) -> list[DeviceNode]:
        nodes = [DeviceNode(d.uverbs.path, d.uverbs.path) for d in devices]
        cm = self._snapshot.rdma_cm
        if nodes and self.wants_rdma_cm and cm is not None and cm.present:
            nodes.append(DeviceNode(cm.path, cm.path))
        return nodes

    @property
    def wants_rdma_cm(self) -> bool:
        """`rdma_cm` goes to pods only in the `default` (iWARP) mode, as the reference does."""
        return self.policy.mode == "default"

    def preferred_allocation(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        gpus: dict[int, int] = {}
        for gpu in self._snapshot.gpus:
            if gpu.numa_node is not None:
                gpus[gpu.numa_node] = gpus.get(gpu.numa_node, 0) + 1
        placement = Placement({n: d.numa_node for n, d in self._exposed.items()}, gpus)
        return preferred(available, must_include, size, placement)

    async def pre_start(self, device_ids: Sequence[str]) -> None:
        if self._prestart is not None:
            await self._prestart(device_ids)

    def pnetid_of(self, device_id: str) -> str | None:
        """The PNETID of the device behind a slot ID (for SMC-R in PreStartContainer)."""
        device = self._exposed.get(device_of(device_id))
        return device.pnetid if device else None


def _too_large(
    resource: str, listed: Sequence[PluginDevice], count: int, policy: ErdmaPolicy
) -> str:
    """Why a ListAndWatch message of ``listed`` (``count`` devices) exceeds kubelet's limit."""
    size = list_message_size(listed)
    if size <= KUBELET_MAX_MESSAGE_BYTES:
        return ""
    slots = policy.slots_per_device
    return (
        f"{resource}: {count} devices x {slots} slots make a ListAndWatch message of {size} "
        f"bytes, over kubelet's {KUBELET_MAX_MESSAGE_BYTES}-byte gRPC limit; lower "
        f"slotsPerDevice to {max(1, slots * KUBELET_MAX_MESSAGE_BYTES // size)} or less, or "
        "expose fewer devices (exposedLocalERIs)"
    )
