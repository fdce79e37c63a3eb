"""The emulated region's records: instance types, instances, ENIs, vSwitches, and ECS errors.

Plain mutable dataclasses; ``EcsWorld`` (``state``) owns them and enforces the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HIGH_PERFORMANCE = "HighPerformance"
STANDARD = "Standard"

# How the emulator refuses a parameter the account may not use (one in invitational preview).
PREVIEW_REFUSED_CODE = "UnsupportedParameter"
PREVIEW_REFUSED_MESSAGE = (
    "The parameter NetworkInterfaceTrafficConfig is in invitational preview and is not "
    "available to this account."
)


class EcsApiError(Exception):
    """An ECS error response: code, message and the HTTP status ECS uses for it."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


@dataclass
class InstanceType:
    """The limits of an instance type that matter for ERIs."""

    name: str
    eri_quantity: int = 0
    network_card_quantity: int = 1
    queue_pair_number: int = 0
    gpu_amount: int = 0
    eni_quantity: int = 8


@dataclass
class InstanceRecord:
    """One running instance; its primary ENI lives in the ENI table."""

    id: str
    instance_type: str
    zone_id: str
    vpc_id: str
    vswitch_id: str
    security_group_ids: list[str]
    private_ip: str
    primary_eni_id: str
    jumbo_frame: bool = False


@dataclass
class EniRecord:
    """One ENI.  ``settle_at``/``settle_to`` model ECS finishing an attach or detach later."""

    id: str
    mac: str
    vswitch_id: str
    vpc_id: str
    zone_id: str
    security_group_ids: list[str]
    private_ip: str
    type: str = "Secondary"
    traffic_mode: str = STANDARD
    queue_pair_number: int = 0
    status: str = "Available"
    instance_id: str = ""
    card_index: int = 0
    tags: dict[str, str] = field(default_factory=dict)
    settle_at: float = 0.0
    settle_to: str = ""


@dataclass
class VSwitch:
    """A vSwitch; ENIs get their IP from its CIDR and the gateway is its first address."""

    id: str
    vpc_id: str
    zone_id: str
    cidr: str
    gateway: str
