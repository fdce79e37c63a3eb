"""Registering a served plugin with kubelet (`v1beta1.Registration/Register` on kubelet.sock).

One attempt is a plain call; retries are the caller's loop, paced by `erdma.aio.Backoff`,
because the caller must also react to kubelet coming back (which resets the pace) while it waits.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.api.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc

API_VERSION = "v1beta1"


class RegistrationError(Exception):
    """Kubelet refused or could not be reached; the message says which and why."""


async def register(
    kubelet_socket: Path,
    *,
    endpoint: str,
    resource_name: str,
    options: pb.DevicePluginOptions,
    timeout: float = 5.0,
) -> None:
    """One Register call; raises RegistrationError naming the socket and kubelet's answer."""
    request = pb.RegisterRequest(
        version=API_VERSION, endpoint=endpoint, resource_name=resource_name, options=options
    )
    async with grpc.aio.insecure_channel(f"unix://{kubelet_socket}") as channel:
        try:
            await pb_grpc.RegistrationStub(channel).Register(request, timeout=timeout)
        except grpc.aio.AioRpcError as err:
            raise RegistrationError(
                f"Register {resource_name} at {kubelet_socket} failed: "
                f"{err.code().name}: {err.details()}"
            ) from err
