"""The smallest Python device plugin that gives the agent's Allocate answer: the yardstick of
`bench.bench_allocate_cpu`.

What a person would write by hand: a `grpc.aio` server (the agent's framework too) on a unix
socket whose Allocate builds, for each container request, the same ContainerAllocateResponse
the agent gave, from plain Python data read once at start. No checks, metrics or logs: the
agent's CPU per call over this one's is what the agent's own Allocate path costs.

Run: `python -m bench.minimal_plugin SOCKET ANSWER_JSON` (a ContainerAllocateResponse as
`bench.bench_allocate_cpu.answer_json` writes it); serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import grpc

from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.api.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc


class MinimalPlugin(pb_grpc.DevicePluginServicer):
    """Allocate answers every container with the one answer it was given; the options RPC
    is there because kubelet (and `bench.agent_load`'s warm-up) calls it."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self._envs: dict[str, str] = answer.get("envs", {})
        self._devices: list[dict[str, str]] = answer.get("devices", [])
        self._mounts: list[dict[str, Any]] = answer.get("mounts", [])
        self._annotations: dict[str, str] = answer.get("annotations", {})
        self._cdi: list[dict[str, str]] = answer.get("cdi_devices", [])

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.aio.ServicerContext
    ) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions()

    async def Allocate(
        self, request: pb.AllocateRequest, context: grpc.aio.ServicerContext
    ) -> pb.AllocateResponse:
        return pb.AllocateResponse(
            container_responses=[
                pb.ContainerAllocateResponse(
                    envs=self._envs,
                    devices=[pb.DeviceSpec(**d) for d in self._devices],
                    mounts=[pb.Mount(**m) for m in self._mounts],
                    annotations=self._annotations,
                    cdi_devices=[pb.CDIDevice(**c) for c in self._cdi],
                )
                for _ in request.container_requests
            ]
        )


async def serve(socket: str, answer: dict[str, Any]) -> None:
    server = grpc.aio.server()
    pb_grpc.add_DevicePluginServicer_to_server(MinimalPlugin(answer), server)
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    await server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("socket")
    parser.add_argument("answer", type=Path, help="ContainerAllocateResponse as JSON")
    args = parser.parse_args()
    asyncio.run(serve(args.socket, json.loads(args.answer.read_text())))


if __name__ == "__main__":
    main()
