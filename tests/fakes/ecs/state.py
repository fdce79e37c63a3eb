"""In-memory ECS world: instances, instance types and ENIs, with the rules ECS enforces.

The rules are the ones ERI management trips over in production: the per-type ERI quota, one
ERI per network card, asynchronous attach/detach (``Attaching``/``Detaching`` for a
configurable time), no deletion of an ENI in use, ClientToken idempotency on create, and
instance release (the instance and its primary ENI go, its other ENIs are detached and stay).
An account that may not use the primary-ENI conversion parameter is modelled too.
State changes are guarded by one lock because tests inspect the world from another thread
while the HTTP server runs.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from tests.fakes.ecs.records import (
    HIGH_PERFORMANCE,
    PREVIEW_REFUSED_CODE,
    PREVIEW_REFUSED_MESSAGE,
    STANDARD,
    EcsApiError,
    EniRecord,
    InstanceRecord,
    InstanceType,
    VSwitch,
)

__all__ = [
    "HIGH_PERFORMANCE",
    "STANDARD",
    "EcsApiError",
    "EcsWorld",
    "EniRecord",
    "InstanceRecord",
    "InstanceType",
    "VSwitch",
]


class EcsWorld:
    """The emulated region.  Methods raise ``EcsApiError`` exactly where ECS would refuse."""

    def __init__(
        self,
        region: str = "cn-hangzhou",
        transition_delay: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.region = region
        self.transition_delay = transition_delay
        self.clock = clock
        self.lock = threading.RLock()
        self.instance_types: dict[str, InstanceType] = {}
        self.instances: dict[str, InstanceRecord] = {}
        self.enis: dict[str, EniRecord] = {}
        self.vswitches: dict[str, VSwitch] = {}
        self.security_groups: set[str] = set()
        self.client_tokens: dict[str, tuple[tuple[object, ...], str]] = {}
        # Set by `refuse_traffic_config`: the account may not use that preview parameter.
        self.traffic_config_refusal: EcsApiError | None = None
        self._eri_listeners: list[Callable[[EniRecord], None]] = []
        self._seq = itertools.count(1)

    # --- world building (tests, benchmarks, `erdma sim`) ---------------------------------

    def add_instance_type(self, itype: InstanceType) -> InstanceType:
        """Register an instance type."""
        with self.lock:
            self.instance_types[itype.name] = itype
        return itype

    def add_instance(
        self, instance_type: str, *, zone_id: str = "cn-hangzhou-k", jumbo_frame: bool = False
    ) -> InstanceRecord:
        """Create a running instance with its own vSwitch, security group and primary ENI."""
        with self.lock:
            if instance_type not in self.instance_types:
                raise KeyError(f"unknown instance type {instance_type!r}; add it first")
            n = next(self._seq)
            vsw = VSwitch(f"vsw-{n:06x}", f"vpc-{n:06x}", zone_id, "10.0.0.0/8", "10.0.0.1")
            self.vswitches[vsw.id] = vsw
            sg = f"sg-{n:06x}"
            self.security_groups.add(sg)
            primary = self._new_eni(vsw, [sg])
            inst = InstanceRecord(
                id=f"i-{n:010x}",
                instance_type=instance_type,
                zone_id=zone_id,
                vpc_id=vsw.vpc_id,
                vswitch_id=vsw.id,
                security_group_ids=[sg],
                private_ip=primary.private_ip,
                primary_eni_id=primary.id,
                jumbo_frame=jumbo_frame,
            )
            primary.type, primary.status, primary.instance_id = "Primary", "InUse", inst.id
            self.instances[inst.id] = inst
            return inst

    def add_attached_eni(
        self,
        instance: InstanceRecord,
        card_index: int,
        *,
        traffic_mode: str,
        queue_pair_number: int,
        tags: dict[str, str] | None = None,
    ) -> EniRecord:
        """Create an ENI in the instance's vSwitch and security groups and attach it on a card.

        This is an ENI made outside the code under test (no ClientToken), e.g. in the console.
        """
        with self.lock:
            eni = self.create_eni(
                vswitch_id=instance.vswitch_id,
                security_group_ids=instance.security_group_ids,
                traffic_mode=traffic_mode,
                queue_pair_number=queue_pair_number,
                tags=tags or {},
                client_token="",
            )
            self.attach(eni.id, instance.id, card_index)
            return eni

    def release_instance(self, instance_id: str) -> None:
        """Release an instance as ECS does: its primary ENI goes with it, and every other ENI
        attached to it is detached and stays, Available, with its tags (nothing deletes it)."""
        with self.lock:
            inst = self.instance(instance_id)
            del self.instances[inst.id]
            self.enis.pop(inst.primary_eni_id, None)
            for eni in self.enis.values():
                if eni.instance_id == inst.id:
                    eni.status, eni.settle_to = "Available", ""
                    eni.instance_id, eni.card_index = "", 0

    def refuse_traffic_config(
        self, code: str = PREVIEW_REFUSED_CODE, status: int = 400, message: str = ""
    ) -> None:
        """Make ModifyNetworkInterfaceAttribute refuse ``NetworkInterfaceTrafficConfig``, as
        for an account that may not use that parameter (the SDK marks it invitational preview)."""
        self.traffic_config_refusal = EcsApiError(code, message or PREVIEW_REFUSED_MESSAGE, status)

    def _new_eni(self, vsw: VSwitch, sgs: list[str]) -> EniRecord:
        n = next(self._seq)
        mac = "00:16:3e:" + ":".join(f"{(n >> s) & 0xFF:02x}" for s in (16, 8, 0))
        ip = f"10.{(n >> 16) & 0xFF}.{(n >> 8) & 0xFF}.{n & 0xFF}"
        eni = EniRecord(f"eni-{n:010x}", mac, vsw.id, vsw.vpc_id, vsw.zone_id, list(sgs), ip)
        self.enis[eni.id] = eni
        return eni

    # --- reads -------------------------------------------------------------------------

    def settle(self) -> None:
        """Finish every attach/detach whose delay has passed."""
        now = self.clock()
        with self.lock:
            for eni in self.enis.values():
                if eni.settle_to and eni.settle_at <= now:
                    eni.status, eni.settle_to = eni.settle_to, ""
                    if eni.status == "Available":
                        eni.instance_id, eni.card_index = "", 0
                    self._announce_eri(eni)

    def instance(self, instance_id: str) -> InstanceRecord:
        """The instance, or ``InvalidInstanceId.NotFound``."""
        inst = self.instances.get(instance_id)
        if inst is None:
            raise EcsApiError(
                "InvalidInstanceId.NotFound", f"The instance {instance_id} does not exist.", 404
            )
        return inst

    def eni(self, eni_id: str) -> EniRecord:
        """The ENI (settled), or ``InvalidEniId.NotFound``."""
        self.settle()
        eni = self.enis.get(eni_id)
        if eni is None:
            raise EcsApiError(
                "InvalidEniId.NotFound", f"The network interface {eni_id} does not exist.", 404
            )
        return eni

    def enis_of(self, instance_id: str) -> list[EniRecord]:
        """ENIs attached (or attaching) to an instance."""
        self.settle()
        return [e for e in self.enis.values() if e.instance_id == instance_id]

    # --- mutations -----------------------------------------------------------------------

    def create_eni(
        self,
        *,
        vswitch_id: str,
        security_group_ids: list[str],
        traffic_mode: str,
        queue_pair_number: int,
        tags: dict[str, str],
        client_token: str,
    ) -> EniRecord:
        """CreateNetworkInterface; the same ClientToken with the same input returns the same ENI."""
        with self.lock:
            fingerprint = (vswitch_id, tuple(security_group_ids), traffic_mode, queue_pair_number)
            if client_token and client_token in self.client_tokens:
                seen, eni_id = self.client_tokens[client_token]
                if seen != fingerprint:
                    raise EcsApiError(
                        "IdempotentParameterMismatch",
                        "The request uses the same client token as a previous, "
                        "but non-identical request.",
                    )
                return self.enis[eni_id]
            vsw = self.vswitches.get(vswitch_id)
            if vsw is None:
                raise EcsApiError(
                    "InvalidVSwitchId.NotFound", f"The vSwitch {vswitch_id} does not exist.", 404
                )
            for sg in security_group_ids:
                if sg not in self.security_groups:
                    raise EcsApiError(
                        "InvalidSecurityGroupId.NotFound",
                        f"The security group {sg} does not exist.",
                        404,
                    )
            if traffic_mode not in (STANDARD, HIGH_PERFORMANCE):
                raise EcsApiError(
                    "InvalidParameter.NetworkInterfaceTrafficMode",
                    f"NetworkInterfaceTrafficMode {traffic_mode!r} is not Standard or "
                    "HighPerformance.",
                )
            eni = self._new_eni(vsw, security_group_ids)
            eni.traffic_mode = traffic_mode
            eni.queue_pair_number = queue_pair_number
            eni.tags = dict(tags)
            if client_token:
                self.client_tokens[client_token] = (fingerprint, eni.id)
            return eni

    def _check_eri_room(self, inst: InstanceRecord, card_index: int, joining: EniRecord) -> None:
        itype = self.instance_types[inst.instance_type]
        if card_index < 0 or card_index >= max(itype.network_card_quantity, 1):
            raise EcsApiError(
                "InvalidParam.NetworkCardIndex",
                f"NetworkCardIndex {card_index} is out of range for {itype.name} "
                f"({itype.network_card_quantity} network cards).",
            )
        attached = [e for e in self.enis_of(inst.id) if e.id != joining.id]
        if len(attached) + 1 > itype.eni_quantity:
            raise EcsApiError(
                "QuotaExceed.ElasticNetworkInterface",
                f"The instance {inst.id} already has {len(attached)} ENIs, the limit of "
                f"{itype.name}.",
                403,
            )
        if joining.traffic_mode != HIGH_PERFORMANCE:
            return
        eris = [e for e in attached if e.traffic_mode == HIGH_PERFORMANCE]
        if len(eris) + 1 > itype.eri_quantity:
            raise EcsApiError(
                "QuotaExceed.Eri",
                f"The instance type {itype.name} supports {itype.eri_quantity} ERIs and "
                f"{len(eris)} are in use.",
                403,
            )
        if any(e.card_index == card_index for e in eris):
            raise EcsApiError(
                "InvalidOperation.NetworkCardEriExists",
                f"Network card {card_index} of {inst.id} already has an ERI.",
                403,
            )

    def attach(self, eni_id: str, instance_id: str, card_index: int) -> None:
        """AttachNetworkInterface: Available -> Attaching -> InUse after the delay."""
        with self.lock:
            inst = self.instance(instance_id)
            eni = self.eni(eni_id)
            if eni.status != "Available":
                raise EcsApiError(
                    "InvalidOperation.InvalidEniState",
                    f"The network interface {eni_id} is {eni.status}, not Available.",
                    403,
                )
            if eni.vpc_id != inst.vpc_id:
                raise EcsApiError(
                    "InvalidOperation.VpcMismatch", "The ENI and instance are in different VPCs."
                )
            self._check_eri_room(inst, card_index, eni)
            eni.instance_id, eni.card_index = instance_id, card_index
            self._transition(eni, "Attaching", "InUse")

    def detach(self, eni_id: str, instance_id: str) -> None:
        """DetachNetworkInterface: InUse -> Detaching -> Available after the delay."""
        with self.lock:
            self.instance(instance_id)
            eni = self.eni(eni_id)
            if eni.type == "Primary":
                raise EcsApiError(
                    "InvalidOperation.DetachPrimaryEniNotAllowed",
                    "The primary network interface cannot be detached.",
                    403,
                )
            if eni.instance_id != instance_id or eni.status != "InUse":
                raise EcsApiError(
                    "InvalidOperation.InvalidEniState",
                    f"The network interface {eni_id} is {eni.status} and not attached to "
                    f"{instance_id}.",
                    403,
                )
            self._transition(eni, "Detaching", "Available")

    def _transition(self, eni: EniRecord, during: str, after: str) -> None:
        if self.transition_delay <= 0:
            eni.status = after
            if after == "Available":
                eni.instance_id, eni.card_index = "", 0
            self._announce_eri(eni)
            return
        eni.status, eni.settle_to = during, after
        eni.settle_at = self.clock() + self.transition_delay

    def delete(self, eni_id: str) -> None:
        """DeleteNetworkInterface: only Available, non-primary ENIs."""
        with self.lock:
            eni = self.eni(eni_id)
            if eni.status != "Available" or eni.type == "Primary":
                raise EcsApiError(
                    "InvalidOperation.InvalidEniState",
                    f"The network interface {eni_id} is {eni.status}; only an Available "
                    "secondary ENI can be deleted.",
                    403,
                )
            del self.enis[eni_id]
            # Simplification: a token whose ENI is gone is forgotten rather than replayed.
            stale = [t for t, (_, ref) in self.client_tokens.items() if ref == eni_id]
            for token in stale:
                del self.client_tokens[token]

    def set_traffic_mode(self, eni_id: str, mode: str, queue_pair_number: int) -> None:
        """ModifyNetworkInterfaceAttribute's NetworkInterfaceTrafficConfig."""
        with self.lock:
            eni = self.eni(eni_id)
            if mode not in (STANDARD, HIGH_PERFORMANCE):
                raise EcsApiError(
                    "InvalidParameter.NetworkInterfaceTrafficMode",
                    f"NetworkInterfaceTrafficMode {mode!r} is not Standard or HighPerformance.",
                )
            converting = mode == HIGH_PERFORMANCE != eni.traffic_mode
            if converting and eni.instance_id:
                probe = replace(eni, traffic_mode=HIGH_PERFORMANCE)
                self._check_eri_room(self.instance(eni.instance_id), eni.card_index, probe)
            eni.traffic_mode, eni.queue_pair_number = mode, queue_pair_number
            if converting:
                self._announce_eri(eni)

    # --- listeners ---------------------------------------------------------------------

    def add_eri_listener(self, listener: Callable[[EniRecord], None]) -> None:
        """Call ``listener`` (under the lock) with each ENI the moment it becomes an ERI in use
        on an instance (attach finished in HighPerformance mode, or an attached ENI converted):
        when the instance's kernel would show it (tests.fakes.eri_hotplug). Those in use
        already are passed at once."""
        with self.lock:
            self._eri_listeners.append(listener)
            for eni in self.enis.values():
                if _is_eri_in_use(eni):
                    listener(eni)

    def remove_eri_listener(self, listener: Callable[[EniRecord], None]) -> None:
        with self.lock:
            self._eri_listeners.remove(listener)

    def _announce_eri(self, eni: EniRecord) -> None:
        """Tell the listeners if ``eni`` is now an ERI in use on an instance."""
        if _is_eri_in_use(eni):
            for listener in self._eri_listeners:
                listener(eni)

    def tag(self, eni_ids: Iterable[str], tags: dict[str, str]) -> None:
        """TagResources on ENIs."""
        with self.lock:
            found = [self.eni(i) for i in eni_ids]
            for eni in found:
                eni.tags.update(tags)


def _is_eri_in_use(eni: EniRecord) -> bool:
    return eni.status == "InUse" and eni.traffic_mode == HIGH_PERFORMANCE
