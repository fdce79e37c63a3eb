"""A fake kubelet device manager that speaks the real device-plugin protocol over unix sockets.

It serves `v1beta1.Registration/Register` on `<dir>/kubelet.sock`, validates each request the
way kubelet does (and strictly checks that the plugin already serves), dials the plugin,
calls GetDevicePluginOptions and keeps a ListAndWatch stream open, recording every list.
Tests and `erdma sim` drive Allocate, GetPreferredAllocation and PreStartContainer through it,
and `restart()` behaves like a kubelet restart: every socket in the directory is deleted and
kubelet.sock comes back, so plugins must notice and register again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from erdma.aio import AsyncService
from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.api.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from erdma.api.names import KUBELET_SOCKET
from erdma.sim.grpcserver import serve_unix

SUPPORTED_VERSIONS = ("v1beta1",)
CHECKPOINT = "kubelet_internal_checkpoint"
# Extended resource names: a DNS subdomain prefix, "/", and a qualified name (no kubernetes.io).
_RESOURCE_RE = re.compile(
    r"^(?!(?:[^/]*\.)?kubernetes\.io/)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


@dataclass(frozen=True)
class Registration:
    """One accepted Register call."""

    resource_name: str
    endpoint: str
    options: pb.DevicePluginOptions
    generation: int
    at: float


class ListRecorder:
    """One ListAndWatch stream, recording every list as {device ID: health}."""

    def __init__(self, stub: pb_grpc.DevicePluginStub, on_change: Callable[[], None]) -> None:
        self.messages: list[pb.ListAndWatchResponse] = []
        self.lists: list[dict[str, str]] = []
        self.open = True
        self.error: str | None = None
        self._call = stub.ListAndWatch(pb.Empty())
        self._on_change = on_change
        self._task = asyncio.get_running_loop().create_task(self._read())

    @property
    def latest(self) -> dict[str, str] | None:
        return self.lists[-1] if self.lists else None

    async def _read(self) -> None:
        try:
            async for message in self._call:
                self.messages.append(message)
                self.lists.append({d.ID: d.health for d in message.devices})
                self._on_change()
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.CANCELLED:
                self.error = f"{err.code().name}: {err.details()}"
        finally:
            self.open = False
            self._on_change()

    async def close(self) -> None:
        """Cancel the stream from the kubelet side, as a dying kubelet connection does."""
        self._call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@dataclass
class PluginEndpoint:
    """What the fake kubelet holds for one registered resource."""

    registration: Registration
    path: Path
    channel: grpc.aio.Channel
    stub: pb_grpc.DevicePluginStub
    options: pb.DevicePluginOptions | None = None
    stream: ListRecorder | None = None
    extra_streams: list[ListRecorder] = field(default_factory=list)
    connect_error: str | None = None

    async def close(self) -> None:
        for recorder in [*self.extra_streams, *([self.stream] if self.stream else [])]:
            await recorder.close()
        await self.channel.close()


class FakeKubelet(AsyncService):
    """Fake kubelet for one device-plugins directory; `async with FakeKubelet(dir) as kubelet`."""

    def __init__(self, plugin_dir: Path, *, register_failures: int = 0) -> None:
        self.plugin_dir = plugin_dir
        self.socket_path = plugin_dir / KUBELET_SOCKET
        self.generation = 0
        self.registrations: list[Registration] = []
        self.register_attempts: list[float] = []
        self.endpoints: dict[str, PluginEndpoint] = {}
        self._failures_left = register_failures
        self._server: grpc.aio.Server | None = None
        self._tick = asyncio.Event()
        self._connects: set[asyncio.Task[None]] = set()

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve Register on kubelet.sock (and create the checkpoint file, as kubelet does)."""
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        checkpoint = self.plugin_dir / CHECKPOINT
        if not checkpoint.exists():
            checkpoint.write_text('{"Data":{"PodDeviceEntries":null}}')
        self._server = await serve_unix(
            self.socket_path,
            functools.partial(
                pb_grpc.add_RegistrationServicer_to_server, _RegistrationService(self)
            ),
            "fake kubelet",
        )
        self._notify()

    async def stop(self) -> None:
        """Stop serving and drop every plugin connection (sockets stay, like a crashed kubelet).

        Registration stops first: a Register answered while the connections close would add an
        endpoint under the loop that closes them."""
        if self._server is not None:
            await self._server.stop(None)
            self._server = None
        for task in list(self._connects):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        endpoints, self.endpoints = list(self.endpoints.values()), {}
        for endpoint in endpoints:
            await endpoint.close()
        self._notify()

    async def restart(self) -> None:
        """Like a kubelet restart: stop, delete every socket in the directory, serve again."""
        await self.stop()
        for entry in os.scandir(self.plugin_dir):
            if stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                os.unlink(entry.path)
        self.generation += 1
        await self.start()

    def fail_next_registers(self, count: int) -> None:
        """Answer the next `count` Register calls with UNAVAILABLE."""
        self._failures_left = count

    # -- state -------------------------------------------------------------------------------

    def _notify(self) -> None:
        woken, self._tick = self._tick, asyncio.Event()
        woken.set()

    async def wait_for(
        self, predicate: Callable[[], bool], timeout: float = 30.0, what: str = ""
    ) -> None:
        """Wait until `predicate()` holds: checked on every kubelet-side change, and every
        0.1 s besides, for predicates on what the kubelet does not see (a log line, a port)."""
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"fake kubelet: not reached within {timeout}s: {what}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._tick.wait(), min(remaining, 0.1))

    def endpoint(self, resource_name: str) -> PluginEndpoint:
        try:
            return self.endpoints[resource_name]
        except KeyError:
            known = sorted(self.endpoints)
            message = f"resource {resource_name!r} is not registered; registered: {known}"
            raise KeyError(message) from None

    def latest(self, resource_name: str) -> dict[str, str] | None:
        """The last device list received for a resource, or None before the first one."""
        endpoint = self.endpoints.get(resource_name)
        return endpoint.stream.latest if endpoint and endpoint.stream else None

    def registered(self, resource_name: str, generation: int | None = None) -> bool:
        """True once `resource_name` registered in `generation` (default: the current one)."""
        wanted = self.generation if generation is None else generation
        return any(
            r.resource_name == resource_name and r.generation == wanted for r in self.registrations
        )

    # -- kubelet-side calls ------------------------------------------------------------------

    async def allocate(
        self, resource_name: str, ids: Sequence[str] | Sequence[Sequence[str]]
    ) -> pb.AllocateResponse:
        """Allocate for one container (a list of IDs) or several (a list of ID lists).

        An empty list sends an AllocateRequest without container requests.
        """
        if isinstance(ids, str):
            raise TypeError(f"ids must be a list of device IDs, not the string {ids!r}")
        per_container: list[list[str]] = (
            [[str(i) for i in ids]]
            if ids and all(isinstance(i, str) for i in ids)
            else [list(c) for c in ids]
        )
        request = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=c) for c in per_container]
        )
        return await self.endpoint(resource_name).stub.Allocate(request, timeout=10)

    async def preferred(
        self, resource_name: str, available: Sequence[str], must: Sequence[str], size: int
    ) -> list[str]:
        endpoint = self.endpoint(resource_name)
        if not endpoint.registration.options.get_preferred_allocation_available:
            raise RuntimeError(f"{resource_name} did not advertise GetPreferredAllocation")
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available),
                    must_include_deviceIDs=list(must),
                    allocation_size=size,
                )
            ]
        )
        response = await endpoint.stub.GetPreferredAllocation(request, timeout=10)
        return list(response.container_responses[0].deviceIDs)

    async def prestart(self, resource_name: str, ids: Sequence[str]) -> None:
        endpoint = self.endpoint(resource_name)
        if not endpoint.registration.options.pre_start_required:
            raise RuntimeError(f"{resource_name} did not advertise PreStartContainer")
        request = pb.PreStartContainerRequest(devices_ids=list(ids))
        await endpoint.stub.PreStartContainer(request, timeout=30)

    def open_stream(self, resource_name: str) -> ListRecorder:
        """An extra ListAndWatch stream on the same endpoint (kubelet opens one per restart)."""
        endpoint = self.endpoint(resource_name)
        recorder = ListRecorder(endpoint.stub, self._notify)
        endpoint.extra_streams.append(recorder)
        return recorder

    # -- registration ------------------------------------------------------------------------

    async def _accept(self, request: pb.RegisterRequest) -> str | None:
        """Validate a Register request; returns the refusal message, or None to accept."""
        if request.version not in SUPPORTED_VERSIONS:
            return f"version {request.version!r} is not supported; supported: {SUPPORTED_VERSIONS}"
        if not _RESOURCE_RE.match(request.resource_name):
            return (
                f"resource_name {request.resource_name!r} is not an extended resource name "
                "(<domain>/<name>, not in kubernetes.io)"
            )
        name = request.endpoint
        if not name or "/" in name or name in (".", ".."):
            return f"endpoint {name!r} must be a bare socket file name in {self.plugin_dir}"
        path = self.plugin_dir / name
        if not await _serving(path):
            return f"endpoint {path} is not serving: a plugin must serve before registering"
        return None

    async def _register(self, request: pb.RegisterRequest) -> None:
        registration = Registration(
            resource_name=request.resource_name,
            endpoint=request.endpoint,
            options=pb.DevicePluginOptions.FromString(request.options.SerializeToString()),
            generation=self.generation,
            at=time.monotonic(),
        )
        old = self.endpoints.pop(request.resource_name, None)
        if old is not None:
            await old.close()
        path = self.plugin_dir / request.endpoint
        channel = grpc.aio.insecure_channel(f"unix://{path}")
        endpoint = PluginEndpoint(registration, path, channel, pb_grpc.DevicePluginStub(channel))
        self.endpoints[request.resource_name] = endpoint
        self.registrations.append(registration)
        task = asyncio.get_running_loop().create_task(self._connect(endpoint))
        self._connects.add(task)
        task.add_done_callback(self._connects.discard)
        self._notify()

    async def _connect(self, endpoint: PluginEndpoint) -> None:
        """What kubelet does after Register: options first, then a long-lived ListAndWatch."""
        try:
            endpoint.options = await endpoint.stub.GetDevicePluginOptions(pb.Empty(), timeout=5)
        except grpc.aio.AioRpcError as err:
            endpoint.connect_error = f"GetDevicePluginOptions: {err.code().name}: {err.details()}"
            self._notify()
            return
        endpoint.stream = ListRecorder(endpoint.stub, self._notify)
        self._notify()


class _RegistrationService(pb_grpc.RegistrationServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self._kubelet = kubelet

    async def Register(
        self, request: pb.RegisterRequest, context: grpc.aio.ServicerContext
    ) -> pb.Empty:
        kubelet = self._kubelet
        kubelet.register_attempts.append(time.monotonic())
        kubelet._notify()
        if kubelet._failures_left > 0:
            kubelet._failures_left -= 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "injected Register failure")
        refusal = await kubelet._accept(request)
        if refusal is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refusal)
        await kubelet._register(request)
        return pb.Empty()


async def _serving(path: Path) -> bool:
    """Whether something accepts connections on the unix socket `path` right now."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(path)), 1.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True
