"""A fake kubelet pod-resources server (`v1.PodResourcesLister`) on a real unix socket.

It answers `List`, `Get` and `GetAllocatableResources` from pods configured in plain
dataclasses, at `<kubelet root>/pod-resources/kubelet.sock` like kubelet, so code that maps a
device ID back to its pod can be tested (and demonstrated) without a node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from erdma.api.podresources.v1 import api_pb2 as pb
from erdma.api.podresources.v1 import api_pb2_grpc as pb_grpc
from erdma.sim.grpcserver import UnixGrpcServer


@dataclass(frozen=True)
class AssignedDevices:
    """Device IDs of one resource held by a container; `numa_nodes` empty = no affinity."""

    resource_name: str
    device_ids: tuple[str, ...]
    numa_nodes: tuple[int, ...] = ()


@dataclass(frozen=True)
class ContainerAssignment:
    name: str
    devices: tuple[AssignedDevices, ...] = ()


@dataclass(frozen=True)
class PodAssignment:
    namespace: str
    name: str
    containers: tuple[ContainerAssignment, ...] = field(default_factory=tuple)


def _devices_pb(devices: AssignedDevices) -> pb.ContainerDevices:
    message = pb.ContainerDevices(
        resource_name=devices.resource_name, device_ids=list(devices.device_ids)
    )
    if devices.numa_nodes:
        message.topology.nodes.extend(pb.NUMANode(ID=n) for n in devices.numa_nodes)
    return message


def _pod_pb(pod: PodAssignment) -> pb.PodResources:
    return pb.PodResources(
        name=pod.name,
        namespace=pod.namespace,
        containers=[
            pb.ContainerResources(name=c.name, devices=[_devices_pb(d) for d in c.devices])
            for c in pod.containers
        ],
    )


class FakePodResources(pb_grpc.PodResourcesListerServicer, UnixGrpcServer):
    """Serves configured pods; `pods` may be replaced at any time (kubelet state changes)."""

    what = "fake pod-resources server"

    def __init__(
        self,
        socket_path: Path,
        pods: Sequence[PodAssignment] = (),
        allocatable: Sequence[AssignedDevices] = (),
    ) -> None:
        self.socket_path = socket_path
        self.pods = list(pods)
        self.allocatable = list(allocatable)
        #: every RPC served, by method name, so callers can check they cache
        self.calls: list[str] = []

    @classmethod
    def for_kubelet_root(
        cls, kubelet_root: Path, pods: Sequence[PodAssignment] = ()
    ) -> FakePodResources:
        return cls(kubelet_root / "pod-resources" / "kubelet.sock", pods)

    async def List(
        self, request: pb.ListPodResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPodResourcesResponse:
        self.calls.append("List")
        return pb.ListPodResourcesResponse(pod_resources=[_pod_pb(p) for p in self.pods])

    async def Get(
        self, request: pb.GetPodResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetPodResourcesResponse:
        self.calls.append("Get")
        for pod in self.pods:
            if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                return pb.GetPodResourcesResponse(pod_resources=_pod_pb(pod))
        await context.abort(
            grpc.StatusCode.NOT_FOUND,
            f"pod {request.pod_namespace}/{request.pod_name} not found",
        )
        raise AssertionError("context.abort returned")  # abort always raises

    async def GetAllocatableResources(
        self, request: pb.AllocatableResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pb.AllocatableResourcesResponse:
        self.calls.append("GetAllocatableResources")
        return pb.AllocatableResourcesResponse(devices=[_devices_pb(d) for d in self.allocatable])

    def register(self, server: grpc.aio.Server) -> None:
        pb_grpc.add_PodResourcesListerServicer_to_server(self, server)
