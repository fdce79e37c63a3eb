"""The cloud interface the controller programs against.

Everything the controller needs from Alibaba Cloud ECS is expressed here as frozen dataclasses
and one ``CloudApi`` protocol of async methods.  The production implementation is
``erdma.controller.ecs.EcsCloud`` (official SDK, retries, rate limit); tests run that same
implementation against ``tests.fakes.ecs`` (a local ECS emulator), so nothing here is faked.

Keeping the interface separate from the SDK wrapper lets the Kubernetes side (reconcilers,
CRD status) and the pure ERI planner (``erdma.controller.eri``) depend on plain data only.

Stability: this module is a contract.  Additions are backwards compatible; any change to an
existing name or signature is listed here.

Changes:
- added ``hint_for`` and ``is_retryable`` (ECS error-code helpers)
- added ``Instance.eni_ids`` and ``CloudApi.leftover_eris``
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# Tag keys/values compatible with the reference controller, so ENIs it created are recognised.
CREATOR_TAG_KEY = "creator"
CREATOR_TAG_VALUE = "alibabacloud-erdma-controller"
INSTANCE_ID_TAG_KEY = "instance-id"
TERWAY_EXCLUDED_TAG_KEY = "terway.alibabacloud.com/excluded"

# ENI life-cycle states as ECS reports them.
ENI_AVAILABLE = "Available"
ENI_IN_USE = "InUse"

# Traffic modes: an ERI is an ENI whose traffic mode is HighPerformance.
TRAFFIC_HIGH_PERFORMANCE = "HighPerformance"


def owned_tags(instance_id: str) -> dict[str, str]:
    """Tags put on every ERI this controller creates (and used to find them again)."""
    return {
        CREATOR_TAG_KEY: CREATOR_TAG_VALUE,
        INSTANCE_ID_TAG_KEY: instance_id,
        TERWAY_EXCLUDED_TAG_KEY: "true",
    }


RETRYABLE_CODES = frozenset(
    {
        "ServiceUnavailable",
        "InternalError",
        "UnknownError",
        "LastTokenProcessing",
        "Timeout",
        "NetworkError",
    }
)
HINTS = {
    "InvalidAccessKeyId": "check accessKeyID in the controller's credential secret",
    "SignatureDoesNotMatch": "check accessKeySecret in the controller's credential secret",
    "InvalidSecurityToken": "the STS token expired or is wrong; check the RAM role setup",
    "Forbidden": "grant ecs:{action} to the controller's RAM user or role (README: RAM policy)",
    "NoPermission": "grant ecs:{action} to the controller's RAM user or role (README: RAM policy)",
    "QuotaExceed": "the instance or account quota is used up; free ENIs or raise the quota",
    "InvalidParameter": "ECS rejected a parameter; check the instance type supports eRDMA",
    "MissingParameter": "ECS rejected the request as incomplete",
    "Throttling": "ECS rate limit reached; lower ecsRateLimit or ask for a higher API quota",
    "Timeout": "ECS did not answer in time; check the endpoint and the network path to it",
    "NetworkError": "could not reach the ECS endpoint; check ecsEndpoint and DNS/network",
    "InvalidRegionId": "check region in the controller config",
    "Credential": "credentials could not be obtained; check credentials.type and its inputs",
}


def hint_for(code: str, action: str) -> str:
    """What a person can do about an ECS error code (empty when nothing useful to say)."""
    for prefix, text in HINTS.items():
        if code.startswith(prefix):
            return text.format(action=action)
    return ""


def is_retryable(code: str, http_status: int) -> bool:
    """Throttling, server-side failures and timeouts can succeed later; 4xx otherwise cannot."""
    return code.startswith("Throttling") or code in RETRYABLE_CODES or http_status >= 500


@dataclass(frozen=True)
class Instance:
    """An ECS instance as far as ERI management cares."""

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
    """The eRDMA-relevant limits of an instance type (``DescribeInstanceTypes``)."""

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

    ``card_index`` is ``Attachment.NetworkCardIndex`` (0 when ECS omits it or the ENI is not
    attached); ``instance_id`` is empty when the ENI is not attached to anything.
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


class CloudError(Exception):
    """A failed cloud call, with the ECS error code, the API action and a hint for people.

    ``retryable`` is true for throttling, 5xx and timeouts; the SDK wrapper has already retried
    those before raising, so callers should requeue rather than loop.
    """

    def __init__(
        self,
        code: str,
        action: str,
        message: str,
        *,
        hint: str = "",
        request_id: str = "",
        http_status: int = 0,
        retryable: bool = False,
    ) -> None:
        self.code = code
        self.action = action
        self.message = message
        self.hint = hint
        self.request_id = request_id
        self.http_status = http_status
        self.retryable = retryable
        text = f"{action} failed: {code}: {message}"
        if hint:
            text += f" (hint: {hint})"
        if request_id:
            text += f" [RequestId {request_id}]"
        super().__init__(text)


class CloudApi(Protocol):
    """Async ECS operations used by the controller.  All calls are idempotent where ECS allows.

    Implementations raise ``CloudError`` for any failure the caller should see.
    """

    region: str

    async def find_instance(
        self, instance_id: str | None = None, private_ip: str | None = None
    ) -> Instance | None:
        """Look an instance up by id, else by private IP; None when nothing matches.

        Raises ``CloudError`` (code ``AmbiguousPrivateIp``) when an IP matches several.
        """
        ...

    async def instance_type_caps(self, instance_type: str) -> InstanceTypeCaps:
        """Limits of one instance type; raises ``CloudError`` when ECS does not know it."""
        ...

    async def jumbo_frame(self, instance_id: str) -> bool:
        """``DescribeInstanceAttribute.EnableJumboFrame``."""
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
        """Create a HighPerformance ENI in the instance's vSwitch and security groups.

        The same ``client_token`` always yields the same ENI, so a retried call is safe.
        """
        ...

    async def attach_eri(self, eni_id: str, instance_id: str, card_index: int) -> None:
        """Start attaching an ENI on a network card; ECS completes it asynchronously."""
        ...

    async def convert_primary(self, eni_id: str, queue_pair_number: int) -> None:
        """Switch the primary ENI to HighPerformance with ``queue_pair_number`` queue pairs."""
        ...

    async def detach_eni(self, eni_id: str, instance_id: str) -> None:
        """Start detaching an ENI; ECS completes it asynchronously."""
        ...

    async def delete_eni(self, eni_id: str) -> None:
        """Delete an Available ENI."""
        ...

    async def tag_enis(self, eni_ids: Sequence[str], tags: Mapping[str, str]) -> None:
        """Add (or overwrite) tags on ENIs."""
        ...
