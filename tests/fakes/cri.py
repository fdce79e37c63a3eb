"""A fake container runtime (CRI `runtime.v1.RuntimeService` subset) on a real unix socket.

It answers `Version`, `ListPodSandbox` and `PodSandboxStatus` for sandboxes configured as plain
dataclasses. Verbose status carries containerd's `info` JSON (`runtimeSpec.linux.namespaces`
with the network namespace path, `config.annotations`), which is where the agent finds a pod's
network namespace and its SMC-R annotation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from erdma.api.cri.runtime.v1 import api_pb2 as pb
from erdma.api.cri.runtime.v1 import api_pb2_grpc as pb_grpc
from erdma.sim.grpcserver import UnixGrpcServer


@dataclass(frozen=True)
class FakeSandbox:
    """One pod sandbox. `netns_path` None with `host_network` is a hostNetwork pod."""

    id: str
    namespace: str
    name: str
    netns_path: str | None = None
    host_network: bool = False
    ready: bool = True
    annotations: Mapping[str, str] = field(default_factory=dict)
    created_at: int = 1

    def metadata(self) -> pb.PodSandboxMetadata:
        return pb.PodSandboxMetadata(name=self.name, namespace=self.namespace, uid=f"uid-{self.id}")

    def state(self) -> pb.PodSandboxState:
        return pb.SANDBOX_READY if self.ready else pb.SANDBOX_NOTREADY

    def info(self) -> str:
        """containerd's verbose `info` JSON for this sandbox."""
        namespaces: list[dict[str, str]] = [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}]
        if not self.host_network:
            namespaces.append({"type": "network", "path": self.netns_path or ""})
        return json.dumps(
            {
                "pid": 4242,
                "runtimeSpec": {"linux": {"namespaces": namespaces}},
                "config": {
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "annotations": dict(self.annotations),
                },
            }
        )


class FakeCri(pb_grpc.RuntimeServiceServicer, UnixGrpcServer):
    """Serves configured sandboxes; `sandboxes` may be replaced at any time."""

    what = "fake CRI server"

    def __init__(
        self, socket_path: Path, sandboxes: Sequence[FakeSandbox] = (), runtime: str = "containerd"
    ) -> None:
        self.socket_path = socket_path
        self.sandboxes = list(sandboxes)
        self.runtime = runtime
        #: every RPC served, by method name
        self.calls: list[str] = []

    async def Version(
        self, request: pb.VersionRequest, context: grpc.aio.ServicerContext
    ) -> pb.VersionResponse:
        self.calls.append("Version")
        return pb.VersionResponse(
            version="0.1.0",
            runtime_name=self.runtime,
            runtime_version="v2.0.0-fake",
            runtime_api_version="v1",
        )

    async def ListPodSandbox(
        self, request: pb.ListPodSandboxRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPodSandboxResponse:
        self.calls.append("ListPodSandbox")
        wanted = request.filter
        items = []
        for box in self.sandboxes:
            if wanted.id and box.id != wanted.id:
                continue
            if wanted.HasField("state") and wanted.state.state != box.state():
                continue
            items.append(
                pb.PodSandbox(
                    id=box.id,
                    metadata=box.metadata(),
                    state=box.state(),
                    created_at=box.created_at,
                    annotations=dict(box.annotations),
                )
            )
        return pb.ListPodSandboxResponse(items=items)

    async def PodSandboxStatus(
        self, request: pb.PodSandboxStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.PodSandboxStatusResponse:
        self.calls.append("PodSandboxStatus")
        box = next((b for b in self.sandboxes if b.id == request.pod_sandbox_id), None)
        if box is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f'an error occurred when try to find sandbox "{request.pod_sandbox_id}": not found',
            )
            raise AssertionError("context.abort returned")  # abort always raises
        mode = pb.NODE if box.host_network else pb.POD
        status = pb.PodSandboxStatus(
            id=box.id,
            metadata=box.metadata(),
            state=box.state(),
            created_at=box.created_at,
            linux=pb.LinuxPodSandboxStatus(
                namespaces=pb.Namespace(options=pb.NamespaceOption(network=mode))
            ),
            annotations=dict(box.annotations),
        )
        info = {"info": box.info()} if request.verbose else {}
        return pb.PodSandboxStatusResponse(status=status, info=info)

    def register(self, server: grpc.aio.Server) -> None:
        pb_grpc.add_RuntimeServiceServicer_to_server(self, server)
