"""Registering a served plugin with kubelet (`v1beta1.Registration/Register` on kubelet.sock).

One attempt is a plain call; retries are the caller's loop, paced by `Backoff`, because the
caller must also react to kubelet coming back (which resets the pace) while it waits.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.api.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc

API_VERSION = "v1beta1"


class RegistrationError(Exception):
    """Kubelet refused or could not be reached; the message says which and why."""


@dataclass
class Backoff:
    """Exponential backoff with full jitter: delay n is uniform in [initial*f^n / 2, initial*f^n].

    Jitter keeps several plugins (and nodes) from hammering a restarted kubelet in lockstep.
    """

    initial: float = 0.1
    factor: float = 2.0
    maximum: float = 30.0
    rng: random.Random = field(default_factory=random.Random)
    _attempt: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        for key, value in (("initial", self.initial), ("maximum", self.maximum)):
            if value <= 0:
                raise ValueError(f"backoff {key}={value!r} is invalid: must be > 0 seconds")
        if self.factor < 1:
            raise ValueError(f"backoff factor={self.factor!r} is invalid: must be >= 1")

    def next_delay(self) -> float:
        ceiling = min(self.maximum, self.initial * self.factor**self._attempt)
        self._attempt += 1
        return self.rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self._attempt = 0


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
