"""A cloud provider that lives in this test tree alone: interfaces kept in a dict.

It is registered under its own name (``PROVIDERS``) and built through
``erdma.controller.registry`` like the ECS provider, so a test that drives the controller on
it shows that the reconciler needs nothing but ``erdma.controller.cloud``. Attach and detach
complete at once; every call is recorded as (operation, interface id) for the test to check.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace

from erdma.controller.cloud import (
    ENI_AVAILABLE,
    ENI_IN_USE,
    TRAFFIC_HIGH_PERFORMANCE,
    CloudError,
    Eni,
    ErrorKind,
    Instance,
    InstanceTypeCaps,
    ProviderContext,
)
from erdma.controller.config import ControllerConfig
from erdma.controller.metrics import ControllerMetrics

NAME = "memory"
#: a registry with this provider in it (and nothing else)
PROVIDERS = {NAME: __name__}


class MemoryCloud:
    """``CloudApi`` on dictionaries."""

    def __init__(self, region: str, metrics: ControllerMetrics) -> None:
        self.region = region
        self.metrics = metrics
        self.instances: dict[str, Instance] = {}
        self.types: dict[str, InstanceTypeCaps] = {}
        self.interfaces: dict[str, Eni] = {}
        self.calls: list[tuple[str, str]] = []
        self._tokens: dict[str, str] = {}
        self._ids = itertools.count(1)

    def add_instance(self, caps: InstanceTypeCaps, private_ip: str) -> Instance:
        """A running instance of type ``caps`` with a primary interface on card 0."""
        number = next(self._ids)
        self.types[caps.instance_type] = caps
        primary = self._new_interface("Standard", 0, tags={})
        instance = Instance(
            id=f"i-mem{number}",
            region=self.region,
            instance_type=caps.instance_type,
            zone_id=f"{self.region}-a",
            vpc_id="vpc-mem",
            vswitch_id="vsw-mem",
            security_group_ids=("sg-mem",),
            private_ip=private_ip,
            primary_eni_id=primary.id,
        )
        self.instances[instance.id] = instance
        self.interfaces[primary.id] = replace(
            primary, status=ENI_IN_USE, instance_id=instance.id, is_primary=True
        )
        return instance

    def created(self) -> list[Eni]:
        """The interfaces made by ``create_eri`` that still exist."""
        return [e for e in self.interfaces.values() if e.created_by_us]

    def _new_interface(self, mode: str, queue_pairs: int, tags: Mapping[str, str]) -> Eni:
        number = next(self._ids)
        eni = Eni(
            id=f"eni-mem{number}",
            mac=f"02:00:00:00:00:{number:02x}",
            status=ENI_AVAILABLE,
            traffic_mode=mode,
            queue_pair_number=queue_pairs,
            card_index=0,
            instance_id="",
            is_primary=False,
            tags=dict(tags),
        )
        self.interfaces[eni.id] = eni
        return eni

    def _interface(self, action: str, eni_id: str) -> Eni:
        self.calls.append((action, eni_id))
        eni = self.interfaces.get(eni_id)
        if eni is None:
            raise CloudError(ErrorKind.NOT_FOUND, "NoSuchInterface", action, eni_id)
        return eni

    async def find_instance(
        self, instance_id: str | None = None, private_ip: str | None = None
    ) -> Instance | None:
        if instance_id in self.instances:
            return self.instances[instance_id]
        return next((i for i in self.instances.values() if i.private_ip == private_ip), None)

    async def instance_type_caps(self, instance_type: str) -> InstanceTypeCaps:
        return self.types[instance_type]

    async def jumbo_frame(self, instance_id: str) -> bool:
        return False

    async def list_enis(self, instance_id: str) -> list[Eni]:
        return [e for e in self.interfaces.values() if e.instance_id == instance_id]

    async def list_enis_by_tags(self, tags: Mapping[str, str]) -> list[Eni]:
        return [e for e in self.interfaces.values() if tags.items() <= e.tags.items()]

    async def describe_enis(self, eni_ids: Sequence[str]) -> list[Eni]:
        return [self.interfaces[i] for i in eni_ids if i in self.interfaces]

    async def leftover_eris(self, instance_id: str) -> list[Eni]:
        return [
            e
            for e in self.created()
            if e.status == ENI_AVAILABLE and e.tags.get("instance-id") == instance_id
        ]

    async def create_eri(
        self,
        instance: Instance,
        card_index: int,
        queue_pair_number: int,
        client_token: str,
        tags: Mapping[str, str],
    ) -> Eni:
        known = self._tokens.get(client_token)
        if known is None:
            eni = self._new_interface(TRAFFIC_HIGH_PERFORMANCE, queue_pair_number, tags)
            known = self._tokens[client_token] = eni.id
        return self._interface("create", known)

    async def attach_eri(self, eni_id: str, instance_id: str, card_index: int) -> None:
        eni = self._interface("attach", eni_id)
        if eni.status != ENI_AVAILABLE:
            raise CloudError(ErrorKind.CONFLICT, "InterfaceBusy", "attach", eni.status)
        self.interfaces[eni_id] = replace(
            eni, status=ENI_IN_USE, instance_id=instance_id, card_index=card_index
        )

    async def convert_primary(self, eni_id: str, queue_pair_number: int) -> None:
        eni = self._interface("convert", eni_id)
        self.interfaces[eni_id] = replace(
            eni, traffic_mode=TRAFFIC_HIGH_PERFORMANCE, queue_pair_number=queue_pair_number
        )

    async def detach_eni(self, eni_id: str, instance_id: str) -> None:
        eni = self._interface("detach", eni_id)
        self.interfaces[eni_id] = replace(eni, status=ENI_AVAILABLE, instance_id="", card_index=0)

    async def delete_eni(self, eni_id: str) -> None:
        eni = self._interface("delete", eni_id)
        if eni.status != ENI_AVAILABLE:
            raise CloudError(ErrorKind.CONFLICT, "InterfaceInUse", "delete", eni.status)
        del self.interfaces[eni_id]

    async def tag_enis(self, eni_ids: Sequence[str], tags: Mapping[str, str]) -> None:
        for eni_id in eni_ids:
            eni = self._interface("tag", eni_id)
            self.interfaces[eni_id] = replace(eni, tags={**eni.tags, **tags})

    async def close(self) -> None:
        """Nothing is held open in memory."""


async def build(config: ControllerConfig, context: ProviderContext) -> MemoryCloud:
    """The provider's entry point, as ``erdma.controller.registry`` calls it."""
    return MemoryCloud(config.region, context.metrics)
