"""A fake kubelet DRA manager: the real plugin-watcher registration and DRA protos on sockets.

It watches `<kubelet>/plugins_registry/` the way kubelet's plugin watcher does, calls
pluginregistration v1 GetInfo on every new socket, validates the answer as kubelet does (type
DRAPlugin, a DNS-subdomain driver name, an endpoint that accepts connections, a DRA service it
knows), reports the verdict with NotifyRegistrationStatus, and then calls NodePrepareResources
/ NodeUnprepareResources on the endpoint with the newest service both sides know. `api`
pins the kubelet's own version ("v1beta1" plays kubelet 1.32-1.33). Like kubelet 1.33+, it
keeps every registered instance of a driver (a rolling update runs two, each with sockets of
its own), calls the one registered last, and falls back to the one before when that one's
registration socket goes; only when the last instance goes is the driver unregistered.
`restart()` forgets every plugin and re-reads the directory, as a restarted kubelet does.
Given an API client and its
node's name, every start also deletes that node's ResourceSlices, as the real kubelet does
(it no longer trusts what drivers published before it started), so a driver that does not
restore its slices leaves the node with nothing to allocate.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import grpc
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.resource_v1 import ResourceSlice

from erdma.aio import AsyncService
from erdma.api.dra.v1 import api_pb2 as v1
from erdma.api.dra.v1 import api_pb2_grpc as v1_grpc
from erdma.api.dra.v1beta1 import api_pb2 as v1beta1
from erdma.api.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from erdma.api.pluginregistration.v1 import api_pb2 as reg
from erdma.api.pluginregistration.v1 import api_pb2_grpc as reg_grpc

Api = Literal["auto", "v1", "v1beta1"]
SERVICES = {"v1": "v1.DRAPlugin", "v1beta1": "v1beta1.DRAPlugin"}
_DRIVER_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass
class DraPlugin:
    """One registered DRA driver as the fake kubelet holds it."""

    name: str
    endpoint: str
    version: str
    registration_socket: Path
    channel: grpc.aio.Channel
    stub: Any


@dataclass
class FakeDraKubelet(AsyncService):
    kubelet_dir: Path
    api: Api = "auto"
    poll: float = 0.05
    client: AsyncClient | None = None
    node_name: str = ""
    #: the instance in use per driver: the one registered last that is still there
    plugins: dict[str, DraPlugin] = field(default_factory=dict)
    #: every registered instance per driver, oldest first
    instances: dict[str, list[DraPlugin]] = field(default_factory=dict)
    #: drivers whose last instance went away, in order
    unregistered: list[str] = field(default_factory=list)
    refusals: list[tuple[str, str]] = field(default_factory=list)
    #: the slice names each start deleted, oldest start first
    wiped: list[list[str]] = field(default_factory=list)
    _seen: set[Path] = field(default_factory=set)
    _task: asyncio.Task[None] | None = None
    _tick: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def registry_dir(self) -> Path:
        return self.kubelet_dir / "plugins_registry"

    async def start(self) -> None:
        self.registry_dir.mkdir(parents=True, exist_ok=True)
        if self.client is not None:
            self.wiped.append(await delete_node_slices(self.client, self.node_name))
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for instances in self.instances.values():
            for plugin in instances:
                await plugin.channel.close()
        self.instances.clear()
        self.plugins.clear()
        self._seen.clear()

    async def restart(self) -> None:
        """Forget everything and re-read the directory, as a restarted kubelet does."""
        await self.stop()
        await self.start()

    async def _watch(self) -> None:
        while True:
            present = {p for p in self.registry_dir.glob("*.sock") if p.is_socket()}
            for gone in self._seen - present:
                self._seen.discard(gone)
                await self._deregister(gone)
            for new in sorted(present - self._seen):
                self._seen.add(new)
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await self._register(new)
            self._tick.set()
            self._tick.clear()
            await asyncio.sleep(self.poll)

    async def _register(self, path: Path) -> None:
        async with grpc.aio.insecure_channel(f"unix://{path}") as channel:
            stub = reg_grpc.RegistrationStub(channel)
            info = await stub.GetInfo(reg.InfoRequest(), timeout=5)
            error, version = self._validate(info)
            await stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=not error, error=error), timeout=5
            )
        if error:
            self.refusals.append((info.name, error))
            return
        dra = grpc.aio.insecure_channel(f"unix://{info.endpoint}")
        module = v1_grpc if version == "v1" else v1beta1_grpc
        plugin = DraPlugin(info.name, info.endpoint, version, path, dra, module.DRAPluginStub(dra))
        self.instances.setdefault(info.name, []).append(plugin)
        self.plugins[info.name] = plugin

    async def _deregister(self, socket_path: Path) -> None:
        """The instance whose registration socket went: drop it, fall back to the one before."""
        for name, instances in list(self.instances.items()):
            for plugin in [p for p in instances if p.registration_socket == socket_path]:
                instances.remove(plugin)
                await plugin.channel.close()
            if instances:
                self.plugins[name] = instances[-1]
            else:
                del self.instances[name]
                self.plugins.pop(name, None)
                self.unregistered.append(name)

    def _validate(self, info: Any) -> tuple[str, str]:
        if info.type != "DRAPlugin":
            return f"plugin type {info.type!r} is not DRAPlugin", ""
        if len(info.name) > 63 or not _DRIVER_RE.match(info.name):
            return f"driver name {info.name!r} is not a DNS subdomain", ""
        if not _accepts(info.endpoint):
            return f"endpoint {info.endpoint!r} does not accept connections", ""
        wanted = ["v1", "v1beta1"] if self.api == "auto" else [self.api]
        for version in wanted:
            if SERVICES[version] in info.supported_versions:
                return "", version
        offered = list(info.supported_versions)
        return f"none of the services {offered} is known to this kubelet ({wanted})", ""

    async def wait_registered(self, driver: str, timeout: float = 30.0) -> DraPlugin:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while driver not in self.plugins:
            if loop.time() > deadline:
                raise TimeoutError(
                    f"fake kubelet: DRA driver {driver!r} not registered within {timeout}s "
                    f"(refused: {self.refusals})"
                )
            await asyncio.sleep(self.poll)
        return self.plugins[driver]

    def _pb(self, driver: str) -> Any:
        return v1 if self.plugins[driver].version == "v1" else v1beta1

    async def prepare(self, driver: str, claims: list[tuple[str, str, str]]) -> Any:
        """NodePrepareResources for (namespace, uid, name) claims; the response as received."""
        pb = self._pb(driver)
        request = pb.NodePrepareResourcesRequest(
            claims=[pb.Claim(namespace=ns, uid=uid, name=name) for ns, uid, name in claims]
        )
        return await self.plugins[driver].stub.NodePrepareResources(request, timeout=10)

    async def unprepare(self, driver: str, claims: list[tuple[str, str, str]]) -> Any:
        pb = self._pb(driver)
        request = pb.NodeUnprepareResourcesRequest(
            claims=[pb.Claim(namespace=ns, uid=uid, name=name) for ns, uid, name in claims]
        )
        return await self.plugins[driver].stub.NodeUnprepareResources(request, timeout=10)


async def delete_node_slices(client: AsyncClient, node: str) -> list[str]:
    """Delete every ResourceSlice of ``node``, as the kubelet does when it starts; the names.

    The kubelet sends one DeleteCollection with the field selector ``spec.nodeName``; a list
    and a delete per slice with the same selector look the same to a driver's watch.
    """
    if not node:
        raise ValueError("the kubelet stand-in needs its node's name to delete its slices")
    names = [
        s.metadata.name
        async for s in client.list(ResourceSlice, fields={"spec.nodeName": node})
        if s.metadata is not None and s.metadata.name
    ]
    for name in names:
        try:
            await client.delete(ResourceSlice, name)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
    return names


def _accepts(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
    return True
