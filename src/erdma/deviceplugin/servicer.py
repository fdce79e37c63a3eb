"""The `v1beta1.DevicePlugin` gRPC service for one ResourcePlugin.

It translates RPCs to plugin calls, maps plugin errors to gRPC status codes with the plugin's
message (kubelet shows it in the pod's events), and records latency and errors. After a busy
spell of unary calls the process's heap is trimmed (`erdma.malloc.TrimWhenIdle`), and the
answers of a plugin that keeps them (`ResourcePlugin.answers_kept`) are encoded once. It also
holds kubelet to the protocol on the plugin's behalf: Allocate may name only advertised Healthy
IDs, a preferred allocation always has the asked size from the offered IDs, and a list kubelet
could not receive is never sent (the stream stays open for the next one).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

import grpc

from erdma import malloc
from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.api.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from erdma.deviceplugin.allocation_log import ALLOCATIONS
from erdma.deviceplugin.convert import (
    KUBELET_MAX_MESSAGE_BYTES,
    MAX_REFUSAL_BYTES,
    allocate_response,
    check_allocate,
    check_preferred,
    container_requests,
    device_list_to_pb,
    settle_preferred,
)
from erdma.deviceplugin.feed import DeviceFeed
from erdma.deviceplugin.metrics import DevicePluginMetrics
from erdma.deviceplugin.plugin import (
    AllocationError,
    ContainerAllocation,
    PluginDevice,
    ResourcePlugin,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
#: the most encoded answers a servicer keeps: one per set of devices asked for together, a few
#: hundred bytes each
KEPT_ENCODINGS = 64


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    """Serves one plugin; device lists come from a DeviceFeed the caller keeps current."""

    def __init__(
        self, plugin: ResourcePlugin, feed: DeviceFeed, metrics: DevicePluginMetrics
    ) -> None:
        self._plugin = plugin
        self._feed = feed
        self._metrics = metrics
        self._resource = plugin.resource_name  # read on every call: kept, not looked up
        self._encodings: dict[
            tuple[int, ...], tuple[list[ContainerAllocation], pb.AllocateResponse]
        ] = {}

    async def _answer(
        self, method: str, context: grpc.aio.ServicerContext, call: Callable[[], Awaitable[T]]
    ) -> T:
        """Run one unary RPC: time it, and turn plugin exceptions into gRPC errors."""
        started = time.perf_counter()
        code: grpc.StatusCode | None = None
        message = ""
        try:
            return await call()
        except AllocationError as err:
            code, message = grpc.StatusCode.INVALID_ARGUMENT, _bounded(str(err))
        except Exception as err:
            log.exception(
                "device plugin RPC failed",
                extra={"resource": self._resource, "method": method},
            )
            code = grpc.StatusCode.INTERNAL
            message = _bounded(f"{method}: {type(err).__name__}: {err}")
        finally:
            self._metrics.latency(self._resource, method).observe(time.perf_counter() - started)
            malloc.AFTER_CALLS.busy()  # what a burst of callers left in the heap goes back
        self._metrics.rpc_errors.labels(
            resource=self._resource, method=method, code=code.name
        ).inc()
        log.warning(
            "device plugin RPC refused",
            extra={"resource": self._resource, "method": method, "error": message},
        )
        await context.abort(code, message)
        raise AssertionError("context.abort returned")  # abort always raises

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.aio.ServicerContext
    ) -> pb.DevicePluginOptions:
        async def options() -> pb.DevicePluginOptions:
            return plugin_options(self._plugin)

        return await self._answer("GetDevicePluginOptions", context, options)

    async def ListAndWatch(
        self, request: pb.Empty, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        version, devices = self._feed.snapshot()
        log.info(
            "ListAndWatch stream opened",
            extra={"resource": self._resource, "devices": len(devices)},
        )
        last_problem = ""
        try:
            while True:
                message, problem = self._list_message(devices)
                if problem and problem != last_problem:  # once per distinct problem
                    log.error(problem, extra={"resource": self._resource})
                last_problem = problem
                if message is not None:
                    yield message
                message = None  # sent: not kept while the stream waits (0.4 MiB for 3,000 IDs)
                version, devices = await self._feed.next_after(version)
        finally:
            log.info("ListAndWatch stream closed", extra={"resource": self._resource})

    def _list_message(
        self, devices: Sequence[PluginDevice]
    ) -> tuple[pb.ListAndWatchResponse | None, str]:
        """The message to send, or None and why not: one bad list must not end the stream.

        Raising here would close the stream, and kubelet opens a new one only after a new
        registration; kubelet silently drops a message over its receive limit.
        """
        try:
            message = device_list_to_pb(devices)
        except (ValueError, TypeError) as err:
            return None, f"{self._resource}: device list not sent: cannot encode it: {err}"
        size = message.ByteSize()
        if size > KUBELET_MAX_MESSAGE_BYTES:
            return None, (
                f"{self._resource}: device list not sent: {len(devices)} IDs make a "
                f"{size} bytes ListAndWatch message, over kubelet's {KUBELET_MAX_MESSAGE_BYTES}"
                "-byte gRPC limit; advertise fewer IDs"
            )
        return message, ""

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.aio.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        async def prefer() -> pb.PreferredAllocationResponse:
            return pb.PreferredAllocationResponse(
                container_responses=[
                    pb.ContainerPreferredAllocationResponse(deviceIDs=self._prefer_one(c))
                    for c in request.container_requests
                ]
            )

        return await self._answer("GetPreferredAllocation", context, prefer)

    def _prefer_one(self, request: pb.ContainerPreferredAllocationRequest) -> list[str]:
        """The plugin's choice, held to kubelet's contract whatever the plugin answered."""
        available = list(dict.fromkeys(request.available_deviceIDs))
        must = list(dict.fromkeys(request.must_include_deviceIDs))
        size = request.allocation_size
        devices = self._feed.snapshot()[1]
        advertised = {d.id for d in devices}
        check_preferred(self._resource, available, must, size, advertised)
        picks = self._plugin.preferred_allocation(available, must, size)
        known = {d.id for d in devices if d.healthy}
        chosen = settle_preferred(available, must, size, picks, known, advertised)
        if chosen != list(picks):
            log.warning(
                "preferred allocation repaired to keep the kubelet contract",
                extra={"resource": self._resource, "picked": list(picks), "answer": chosen},
            )
        return chosen

    async def Allocate(
        self, request: pb.AllocateRequest, context: grpc.aio.ServicerContext
    ) -> pb.AllocateResponse:
        async def allocate() -> pb.AllocateResponse:
            wanted = container_requests(request)
            check_allocate(self._resource, wanted, self._feed.health(), self._feed.snapshot()[1])
            allocations = self._plugin.allocate(wanted) if wanted else []
            if len(allocations) != len(wanted):
                raise RuntimeError(
                    f"plugin answered {len(allocations)} containers for {len(wanted)} requests"
                )
            ALLOCATIONS.allocated(self._resource, wanted)
            return self._encoded(allocations)

        return await self._answer("Allocate", context, allocate)

    def _encoded(self, allocations: list[ContainerAllocation]) -> pb.AllocateResponse:
        """The answer's protobuf, kept per answer when the plugin keeps its answers: encoding
        the same kept objects again was the largest single part of the agent's own Python per
        Allocate (bench/bench_allocate_cpu.py). A kept entry holds its allocations, so no
        other object can take their ids while it lasts; the entries are dropped together once
        there are `KEPT_ENCODINGS`."""
        if not self._plugin.answers_kept:
            return allocate_response(allocations)
        key = tuple(map(id, allocations))
        kept = self._encodings.get(key)
        if kept is None:
            if len(self._encodings) >= KEPT_ENCODINGS:
                self._encodings.clear()
            kept = self._encodings[key] = (allocations, allocate_response(allocations))
        return kept[1]

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.aio.ServicerContext
    ) -> pb.PreStartContainerResponse:
        async def prestart() -> pb.PreStartContainerResponse:
            await self._plugin.pre_start(list(request.devices_ids))
            return pb.PreStartContainerResponse()

        return await self._answer("PreStartContainer", context, prestart)


def plugin_options(plugin: ResourcePlugin) -> pb.DevicePluginOptions:
    """The options a plugin advertises, both in Register and in GetDevicePluginOptions."""
    return pb.DevicePluginOptions(
        pre_start_required=plugin.pre_start_required,
        get_preferred_allocation_available=plugin.preferred_allocation_available,
    )


def _bounded(message: str) -> str:
    """``message`` cut to `MAX_REFUSAL_BYTES` of UTF-8, whatever built it (see `summarize`)."""
    data = message.encode()
    if len(data) <= MAX_REFUSAL_BYTES:
        return message
    return data[: MAX_REFUSAL_BYTES - 20].decode(errors="ignore") + " ... (cut)"
