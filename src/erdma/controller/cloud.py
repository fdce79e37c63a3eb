"""The cloud interface the controller programs against, in provider-neutral terms.

The reconciler needs a handful of operations on the network interfaces of a node (find the
instance, describe its interfaces, create, attach, convert the primary, tag, detach, delete)
and a small, closed set of failure kinds to decide what to do next. This module is that
contract: frozen dataclasses, one ``CloudApi`` protocol of async methods, and ``CloudError``
with an ``ErrorKind``. A cloud provider (``erdma.controller.providers.<name>``, chosen by
``erdma.controller.registry``) implements it and maps its own error codes onto the kinds; the
reconciler never sees a provider's codes except as text for people.

Tests run the ECS provider against ``tests.fakes.ecs`` (a local ECS emulator) and drive the
reconciler with an in-memory provider defined in the tests alone.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from erdma.controller.config import ControllerConfig
from erdma.controller.metrics import ControllerMetrics

# The tags by which the controller marks the interfaces it creates and finds them again: every
# provider stores them with the interface (``create_eri``, ``tag_enis``) and filters by them
# (``list_enis_by_tags``, ``leftover_eris``). The values are the reference controller's, so
# interfaces it created are recognised.
CREATOR_TAG_KEY = "creator"
CREATOR_TAG_VALUE = "alibabacloud-erdma-controller"
INSTANCE_ID_TAG_KEY = "instance-id"
TERWAY_EXCLUDED_TAG_KEY = "terway.alibabacloud.com/excluded"

# Interface life-cycle states: a provider reports its own states as these two (or passes an
# intermediate state through as text, which the reconciler treats as "not yet").
ENI_AVAILABLE = "Available"
ENI_IN_USE = "InUse"

# Traffic modes: an ERI is an interface whose traffic mode is HighPerformance (RDMA).
TRAFFIC_HIGH_PERFORMANCE = "HighPerformance"


def owned_tags(instance_id: str) -> dict[str, str]:
    """Tags put on every ERI this controller creates (and used to find them again)."""
    return {
        CREATOR_TAG_KEY: CREATOR_TAG_VALUE,
        INSTANCE_ID_TAG_KEY: instance_id,
        TERWAY_EXCLUDED_TAG_KEY: "true",
    }


@dataclass(frozen=True)
class Instance:
    """A cloud instance (the machine behind a Node) as far as ERI management cares."""

    id: str
    region: str
    instance_type: str
    zone_id: str
    vpc_id: str
    vswitch_id: str
    security_group_ids: tuple[str, ...]
    private_ip: str
    primary_eni_id: str
    status: str = "Running"
    #: every ENI DescribeInstances lists as attached (primary included); empty when unknown
    eni_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class InstanceTypeCaps:
    """The eRDMA-relevant limits of an instance type."""

    instance_type: str
    eri_quantity: int
    network_card_quantity: int
    queue_pair_number: int
    gpu_amount: int

    @property
    def supports_eri(self) -> bool:
        """A type without an ERI quota cannot carry eRDMA at all."""
        return self.eri_quantity > 0


@dataclass(frozen=True)
class Eni:
    """An elastic network interface; an ERI when ``traffic_mode`` is HighPerformance.

    ``card_index`` is the network card it is attached on (0 when the provider does not say or
    the interface is not attached); ``instance_id`` is empty when it is attached to nothing.
    """

    id: str
    mac: str
    status: str
    traffic_mode: str
    queue_pair_number: int
    card_index: int
    instance_id: str
    is_primary: bool
    tags: Mapping[str, str] = field(default_factory=dict, hash=False)
    vswitch_id: str = ""
    private_ip: str = ""

    @property
    def is_eri(self) -> bool:
        """True when the ENI carries RDMA traffic."""
        return self.traffic_mode == TRAFFIC_HIGH_PERFORMANCE

    @property
    def created_by_us(self) -> bool:
        """True for ENIs tagged by this controller (or the reference one)."""
        return self.tags.get(CREATOR_TAG_KEY) == CREATOR_TAG_VALUE


class ErrorKind(enum.Enum):
    """What a failed cloud call means to the reconciler: the closed set it switches on.

    A provider maps each of its error codes to one kind; anything it cannot place is
    ``REFUSED`` (a retry of the same request cannot help) or ``TRANSIENT`` (it may).
    """

    THROTTLED = "throttled"  # the provider's rate limit: try again later
    TRANSIENT = "transient"  # 5xx, timeouts, network errors: try again later
    NOT_FOUND = "not-found"  # the instance, type or interface does not exist (any more)
    CONFLICT = "state-conflict"  # the resource is in a state that does not allow the call yet
    QUOTA = "quota"  # a quota is used up
    REFUSED = "refused"  # denied or invalid: a retry of the same request cannot help

    @property
    def retryable(self) -> bool:
        """Throttled and transient failures can succeed later as they are."""
        return self in (ErrorKind.THROTTLED, ErrorKind.TRANSIENT)


class CloudError(Exception):
    """A failed cloud call: its kind, the provider's code and action, and a hint for people.

    ``code`` and ``action`` are the provider's own words, for messages and metrics only; the
    reconciler decides on ``kind``. Retryable kinds have already been retried by the provider
    before it raises, so callers should requeue rather than loop.
    """

    def __init__(
        self,
        kind: ErrorKind,
        code: str,
        action: str,
        message: str,
        *,
        hint: str = "",
        request_id: str = "",
        http_status: int = 0,
    ) -> None:
        self.kind = kind
        self.code = code
        self.action = action
        self.message = message
        self.hint = hint
        self.request_id = request_id
        self.http_status = http_status
        text = f"{action} failed: {code}: {message}"
        if hint:
            text += f" (hint: {hint})"
        if request_id:
            text += f" [RequestId {request_id}]"
        super().__init__(text)

    @property
    def retryable(self) -> bool:
        """A retry later can succeed (throttled, transient)."""
        return self.kind.retryable


class CloudApi(Protocol):
    """Async operations on a node's network interfaces, all idempotent where the cloud allows.

    Implementations raise ``CloudError`` for any failure the caller should see, and count their
    calls in ``metrics`` (the controller serves that registry at ``/metrics``).
    """

    region: str
    metrics: ControllerMetrics

    async def find_instance(
        self, instance_id: str | None = None, private_ip: str | None = None
    ) -> Instance | None:
        """Look an instance up by id, else by private IP; None when nothing matches.

        Raises ``CloudError`` (``REFUSED``) when an IP matches several.
        """
        ...

    async def instance_type_caps(self, instance_type: str) -> InstanceTypeCaps:
        """Limits of one instance type; raises ``CloudError`` (``NOT_FOUND``) for an unknown one."""
        ...

    async def jumbo_frame(self, instance_id: str) -> bool:
        """Whether the instance has jumbo frames enabled."""
        ...

    async def list_enis(self, instance_id: str) -> list[Eni]:
        """Every ENI attached to the instance, primary included, over all pages."""
        ...

    async def list_enis_by_tags(self, tags: Mapping[str, str]) -> list[Eni]:
        """Every ENI in the region carrying all of ``tags``, over all pages."""
        ...

    async def describe_enis(self, eni_ids: Sequence[str]) -> list[Eni]:
        """The given ENIs (missing ones are simply absent), over all pages."""
        ...

    async def leftover_eris(self, instance_id: str) -> list[Eni]:
        """Available (unattached) ERIs this controller created for the instance."""
        ...

    async def create_eri(
        self,
        instance: Instance,
        card_index: int,
        queue_pair_number: int,
        client_token: str,
        tags: Mapping[str, str],
    ) -> Eni:
        """Create a HighPerformance interface in the instance's subnet and security groups.

        The same ``client_token`` always yields the same ENI, so a retried call is safe.
        """
        ...

    async def attach_eri(self, eni_id: str, instance_id: str, card_index: int) -> None:
        """Start attaching an interface on a network card; the cloud completes it later."""
        ...

    async def convert_primary(self, eni_id: str, queue_pair_number: int) -> None:
        """Switch the primary ENI to HighPerformance with ``queue_pair_number`` queue pairs."""
        ...

    async def detach_eni(self, eni_id: str, instance_id: str) -> None:
        """Start detaching an interface; the cloud completes it later."""
        ...

    async def delete_eni(self, eni_id: str) -> None:
        """Delete an Available ENI."""
        ...

    async def tag_enis(self, eni_ids: Sequence[str], tags: Mapping[str, str]) -> None:
        """Add (or overwrite) tags on ENIs."""
        ...

    async def close(self) -> None:
        """Release what the client holds open (its HTTP connections) when the controller stops."""
        ...


@dataclass(frozen=True)
class ProviderContext:
    """What a provider is built from besides the controller config: the command line's
    credential file and metadata-service URL, the process environment, and the metrics its
    calls are counted in (the controller serves them)."""

    credential_path: str
    metadata_url: str
    metrics: ControllerMetrics
    environ: Mapping[str, str]


class BuildCloud(Protocol):
    """A provider's entry point (its module's ``build``): a ready ``CloudApi``, or a
    ``ValueError`` whose message names the bad input and the fix."""

    async def __call__(self, config: ControllerConfig, context: ProviderContext) -> CloudApi: ...
