"""``CloudApi`` on the official Alibaba Cloud ECS SDK, with retries and a shared rate limit.

Every call goes through ``EcsCloud._call``: wait while its API cools down after a throttle,
wait for the token bucket, call the SDK's async method, and on failure decide between retrying
(throttling: after the API's shared cool-down; 5xx, timeouts, network errors: jittered
exponential backoff) and raising a ``CloudError`` that names the ECS code, the action and what
a person can do about it (``errors``).  The SDK's own retry is left off so there is exactly one
retry policy.  List calls follow ``NextToken`` to the last page.

Look-ups by id (instances, ENIs), the search for leftover ERIs and tagging are coalesced over
``batch_window`` across concurrent reconciles (``erdma.controller.batching``): a fleet joining
costs one DescribeInstances per 100 Nodes, not one per Node.
Responses become ``CloudApi`` dataclasses in ``responses``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from alibabacloud_tea_openapi.models import Config as OpenApiConfig  # type: ignore[import-untyped]
from alibabacloud_tea_util.models import RuntimeOptions  # type: ignore[import-untyped]

from erdma.controller.batching import Coalescer
from erdma.controller.cloud import (
    CREATOR_TAG_KEY,
    CREATOR_TAG_VALUE,
    ENI_AVAILABLE,
    TRAFFIC_HIGH_PERFORMANCE,
    CloudError,
    Eni,
    ErrorKind,
    Instance,
    InstanceTypeCaps,
)
from erdma.controller.metrics import ControllerMetrics
from erdma.controller.providers.ecs import responses, sdk, transport
from erdma.controller.providers.ecs.errors import classify
from erdma.controller.providers.ecs.leftovers import LeftoverSearch
from erdma.controller.providers.ecs.settings import EcsSettings
from erdma.controller.ratelimit import ThrottleGate, TokenBucket

PAGE_SIZE = 100  # MaxResults and NetworkInterfaceId.N both cap at 100 per request
TAG_BATCH = 50  # TagResources accepts at most 50 resource ids
LEFTOVER_BATCH = 1000  # instances whose leftovers one region-wide query looks for
#: a batch that keeps gaining company stays open up to this many batch windows (``batching``)
BATCH_HOLD = 4
#: how long the answer of a region-wide leftover query serves later searches, in batch windows
#: (``leftovers``)
LEFTOVER_REUSE = 20
USER_AGENT = "erdma-k8s-controller/0.1"

Resp = TypeVar("Resp")
V = TypeVar("V")

ecs_models, SdkClient = sdk.load()
EcsClient = transport.shared_session_client(SdkClient)  # one HTTP session per client


class _CarriedOut(Exception):
    """An earlier try of the call, whose answer was lost, did the work (`EcsCloud._call`)."""


class EcsCloud:
    """The production ``CloudApi``."""

    def __init__(
        self,
        settings: EcsSettings,
        credential: Any,
        *,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.region = settings.region
        self.settings = settings
        self.metrics = metrics or ControllerMetrics()
        self.bucket = TokenBucket(settings.rate_limit, settings.burst)
        self._rng = rng or random.Random()
        self._sleep = sleep
        self.throttle = ThrottleGate(settings.throttle, rng=self._rng, sleep=sleep)
        self._caps: dict[str, asyncio.Future[InstanceTypeCaps]] = {}
        self._instances = self._coalescer(self._instances_by_id, PAGE_SIZE)
        self._enis = self._coalescer(self._enis_by_id, PAGE_SIZE)
        self._leftovers = LeftoverSearch(
            self._available_owned,
            lambda fetch: self._coalescer(fetch, LEFTOVER_BATCH),
            settings.batch_window * LEFTOVER_REUSE,
        )
        self._taggers: dict[frozenset[tuple[str, str]], Coalescer[str, None]] = {}
        self._client = EcsClient(
            OpenApiConfig(
                credential=credential,
                endpoint=settings.resolved_endpoint,
                protocol=settings.protocol,
                region_id=settings.region,
                user_agent=USER_AGENT,
            )
        )

    async def close(self) -> None:
        """Close the SDK client's HTTP session (its kept-alive connections to ECS)."""
        await self._client.aclose()

    def _coalescer(
        self, fetch: Callable[[list[str]], Awaitable[Mapping[str, V]]], max_batch: int
    ) -> Coalescer[str, V]:
        """A batch of look-ups (or tags) of one kind, sharing this client's rate limit."""
        window = self.settings.batch_window
        return Coalescer(
            fetch, window=window, max_batch=max_batch, bucket=self.bucket, hold=window * BATCH_HOLD
        )

    def __repr__(self) -> str:
        return f"EcsCloud(region={self.region!r}, endpoint={self.settings.resolved_endpoint!r})"

    def _runtime(self) -> RuntimeOptions:
        ms = int(self.settings.timeout_seconds * 1000)
        return RuntimeOptions(read_timeout=ms, connect_timeout=ms, autoretry=False)

    async def _call(
        self,
        action: str,
        method: Callable[[Any, RuntimeOptions], Awaitable[Resp]],
        request: Any,
        carried_out: Callable[[], Awaitable[bool]] | None = None,
    ) -> Resp:
        """Send ``request``, retrying what can be retried; raises `_CarriedOut` when
        ``carried_out`` says an earlier try whose answer never came (timeout, network error,
        5xx) did the work."""
        policy = self.settings.retry
        for attempt in range(policy.max_attempts):
            while True:
                await self.throttle.wait(action)
                passed = self.throttle.clock()
                await self.bucket.acquire()
                if not self.throttle.struck_since(action, passed):
                    break  # else throttled while this call waited for the rate limit
            started = self.throttle.clock()
            try:
                response = await method(request, self._runtime())
            except Exception as exc:  # the SDK raises several unrelated exception types
                error = classify(exc, action, self.settings.timeout_seconds)
                self.metrics.ecs_answered(action, error.code)
                throttled = error.kind is ErrorKind.THROTTLED
                if throttled:
                    self.metrics.ecs_throttles.labels(action).inc()
                    self.throttle.throttled(action, started)
                if not error.retryable or attempt + 1 == policy.max_attempts:
                    raise error from exc
                if not throttled:  # a throttled API waits for its cool-down instead
                    await self._sleep(policy.backoff(attempt, self._rng))
                    if carried_out is not None and await carried_out():
                        raise _CarriedOut(action) from exc  # looked before sending again
                self.metrics.ecs_retries.labels(action).inc()
                continue
            self.metrics.ecs_answered(action)
            self.throttle.succeeded(action, started)
            return response
        raise AssertionError("unreachable: the loop returns or raises")

    # --- instances -------------------------------------------------------------------------

    async def find_instance(
        self, instance_id: str | None = None, private_ip: str | None = None
    ) -> Instance | None:
        """DescribeInstances by id (batched with concurrent look-ups), then by private IP."""
        if not instance_id and not private_ip:
            raise ValueError("find_instance needs instance_id or private_ip")
        if instance_id:
            found = await self._instances.get(instance_id)
            if found is not None or not private_ip:
                return found
        query = {"private_ip_addresses": json.dumps([private_ip])}
        matches = await self._describe_instances(query)
        if len(matches) > 1:
            raise CloudError(
                ErrorKind.REFUSED,
                "AmbiguousPrivateIp",
                "DescribeInstances",
                f"{len(matches)} instances match {query}",
                hint="the node's InternalIP is not unique in this region; set providerID",
            )
        return matches[0] if matches else None

    async def _instances_by_id(self, ids: list[str]) -> dict[str, Instance]:
        found = await self._describe_instances({"instance_ids": json.dumps(ids)})
        return {i.id: i for i in found}

    async def _describe_instances(self, query: Mapping[str, str]) -> list[Instance]:
        found: list[Instance] = []
        token = ""
        client = self._client.describe_instances_with_options_async
        while True:
            request = ecs_models.DescribeInstancesRequest(
                region_id=self.region, max_results=PAGE_SIZE, next_token=token or None, **query
            )
            resp = await self._call("DescribeInstances", client, request)
            items = resp.body.instances.instance if resp.body.instances else []
            found.extend(responses.instance(i, self.region) for i in items or [])
            token = resp.body.next_token or ""
            if not token:
                return found

    async def instance_type_caps(self, instance_type: str) -> InstanceTypeCaps:
        """DescribeInstanceTypes, once per type: concurrent callers share one request."""
        pending = self._caps.get(instance_type)
        if pending is None or (pending.done() and pending.exception() is not None):
            pending = asyncio.ensure_future(self._fetch_caps(instance_type))
            self._caps[instance_type] = pending
        return await asyncio.shield(pending)

    async def _fetch_caps(self, instance_type: str) -> InstanceTypeCaps:
        request = ecs_models.DescribeInstanceTypesRequest(instance_types=[instance_type])
        client = self._client.describe_instance_types_with_options_async
        resp = await self._call("DescribeInstanceTypes", client, request)
        types = resp.body.instance_types.instance_type if resp.body.instance_types else []
        match = [t for t in types or [] if t.instance_type_id == instance_type]
        if not match:
            raise CloudError(
                ErrorKind.NOT_FOUND,
                "InvalidInstanceType.NotFound",
                "DescribeInstanceTypes",
                f"instance type {instance_type!r} is unknown to ECS in {self.region}",
            )
        return responses.instance_type_caps(match[0], instance_type)

    async def jumbo_frame(self, instance_id: str) -> bool:
        """DescribeInstanceAttribute.EnableJumboFrame."""
        request = ecs_models.DescribeInstanceAttributeRequest(instance_id=instance_id)
        client = self._client.describe_instance_attribute_with_options_async
        resp = await self._call("DescribeInstanceAttribute", client, request)
        return responses.jumbo_frame(resp.body)

    # --- network interfaces ----------------------------------------------------------------

    async def _describe(self, **query: Any) -> list[Eni]:
        found: list[Eni] = []
        token = ""
        client = self._client.describe_network_interfaces_with_options_async
        while True:
            request = ecs_models.DescribeNetworkInterfacesRequest(
                region_id=self.region, max_results=PAGE_SIZE, next_token=token or None, **query
            )
            resp = await self._call("DescribeNetworkInterfaces", client, request)
            sets = resp.body.network_interface_sets
            found.extend(responses.eni(i) for i in (sets.network_interface_set or []) if sets)
            token = resp.body.next_token or ""
            if not token:
                return found

    async def list_enis(self, instance_id: str) -> list[Eni]:
        """All ENIs of an instance."""
        return await self._describe(instance_id=instance_id)

    async def list_enis_by_tags(self, tags: Mapping[str, str]) -> list[Eni]:
        """All ENIs carrying every tag."""
        tag = [
            ecs_models.DescribeNetworkInterfacesRequestTag(key=k, value=v) for k, v in tags.items()
        ]
        return await self._describe(tag=tag)

    async def describe_enis(self, eni_ids: Sequence[str]) -> list[Eni]:
        """The given ENIs, batched (100 ids per request) with concurrent look-ups."""
        found = await asyncio.gather(*(self._enis.get(i) for i in dict.fromkeys(eni_ids)))
        return [e for e in found if e is not None]

    async def _enis_by_id(self, ids: list[str]) -> dict[str, Eni]:
        return {e.id: e for e in await self._describe(network_interface_id=ids)}

    async def leftover_eris(self, instance_id: str) -> list[Eni]:
        """Available ERIs of ours for the instance (``leftovers``: one query serves many)."""
        return await self._leftovers.find(instance_id)

    async def _available_owned(self) -> list[Eni]:
        """Every Available ERI this controller created, in the whole region."""
        creator = ecs_models.DescribeNetworkInterfacesRequestTag(
            key=CREATOR_TAG_KEY, value=CREATOR_TAG_VALUE
        )
        return await self._describe(tag=[creator], status=ENI_AVAILABLE)

    async def create_eri(
        self,
        instance: Instance,
        card_index: int,
        queue_pair_number: int,
        client_token: str,
        tags: Mapping[str, str],
    ) -> Eni:
        """CreateNetworkInterface (HighPerformance) with a ClientToken."""
        request = ecs_models.CreateNetworkInterfaceRequest(
            region_id=self.region,
            v_switch_id=instance.vswitch_id,
            security_group_ids=list(instance.security_group_ids),
            network_interface_name=f"eri-{instance.id}-{card_index}",
            network_interface_traffic_mode=TRAFFIC_HIGH_PERFORMANCE,
            queue_pair_number=queue_pair_number,
            client_token=client_token,
            tag=[
                ecs_models.CreateNetworkInterfaceRequestTag(key=k, value=v) for k, v in tags.items()
            ],
        )
        client = self._client.create_network_interface_with_options_async
        try:
            body = (await self._call("CreateNetworkInterface", client, request)).body
        finally:  # answered or not, ECS may hold the ERI from now on (``leftover_eris``)
            self._leftovers.create_ended(instance.id)
        return responses.created_eri(body, instance, card_index, queue_pair_number, tags)

    async def attach_eri(self, eni_id: str, instance_id: str, card_index: int) -> None:
        """AttachNetworkInterface; NetworkCardIndex is sent only when not 0, as ECS expects.

        An attach whose answer was lost is looked at before it is sent again: ECS may have
        carried it out, and would refuse a second one for the ERI's state."""
        request = ecs_models.AttachNetworkInterfaceRequest(
            region_id=self.region,
            network_interface_id=eni_id,
            instance_id=instance_id,
            network_card_index=card_index or None,
        )

        async def attaching() -> bool:
            found = await self._describe(network_interface_id=[eni_id])
            return any(
                e.id == eni_id and e.instance_id == instance_id and e.status != ENI_AVAILABLE
                for e in found
            )

        client = self._client.attach_network_interface_with_options_async
        with contextlib.suppress(_CarriedOut):
            await self._call("AttachNetworkInterface", client, request, carried_out=attaching)

    async def convert_primary(self, eni_id: str, queue_pair_number: int) -> None:
        """ModifyNetworkInterfaceAttribute's traffic config to HighPerformance."""
        config = ecs_models.ModifyNetworkInterfaceAttributeRequestNetworkInterfaceTrafficConfig(
            network_interface_traffic_mode=TRAFFIC_HIGH_PERFORMANCE,
            queue_pair_number=queue_pair_number,
        )
        request = ecs_models.ModifyNetworkInterfaceAttributeRequest(
            region_id=self.region,
            network_interface_id=eni_id,
            network_interface_traffic_config=config,
        )
        client = self._client.modify_network_interface_attribute_with_options_async
        await self._call("ModifyNetworkInterfaceAttribute", client, request)

    async def detach_eni(self, eni_id: str, instance_id: str) -> None:
        """DetachNetworkInterface."""
        request = ecs_models.DetachNetworkInterfaceRequest(
            region_id=self.region, network_interface_id=eni_id, instance_id=instance_id
        )
        await self._call(
            "DetachNetworkInterface",
            self._client.detach_network_interface_with_options_async,
            request,
        )

    async def delete_eni(self, eni_id: str) -> None:
        """DeleteNetworkInterface."""
        request = ecs_models.DeleteNetworkInterfaceRequest(
            region_id=self.region, network_interface_id=eni_id
        )
        await self._call(
            "DeleteNetworkInterface",
            self._client.delete_network_interface_with_options_async,
            request,
        )

    async def tag_enis(self, eni_ids: Sequence[str], tags: Mapping[str, str]) -> None:
        """TagResources: requests with the same tags are batched, 50 ENIs per request."""
        key = frozenset(tags.items())
        tagger = self._taggers.get(key)
        if tagger is None:
            wanted = dict(tags)

            async def tag(ids: list[str]) -> dict[str, None]:
                await self._tag(ids, wanted)
                return {}

            tagger = self._coalescer(tag, TAG_BATCH)
            self._taggers[key] = tagger
        await asyncio.gather(*(tagger.get(i) for i in dict.fromkeys(eni_ids)))

    async def _tag(self, eni_ids: list[str], tags: Mapping[str, str]) -> None:
        request = ecs_models.TagResourcesRequest(
            region_id=self.region,
            resource_type="eni",
            resource_id=eni_ids,
            tag=[ecs_models.TagResourcesRequestTag(key=k, value=v) for k, v in tags.items()],
        )
        await self._call("TagResources", self._client.tag_resources_with_options_async, request)
