"""grpc.aio servers on unix sockets, as the fake kubelet, CRI and pod-resources servers use."""

from __future__ import annotations

import abc
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import grpc

from erdma.aio import AsyncService

#: Adds a servicer to a server, e.g. ``functools.partial(add_XServicer_to_server, servicer)``.
Register = Callable[[grpc.aio.Server], object]


async def serve_unix(socket_path: Path, register: Register, what: str) -> grpc.aio.Server:
    """A started server on ``socket_path``: its directory is created, a stale socket replaced.

    ``what`` names the server in the OSError raised when the socket cannot be bound.
    """
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    socket_path.unlink(missing_ok=True)
    server = grpc.aio.server()
    register(server)
    if server.add_insecure_port(f"unix://{socket_path}") == 0:
        raise OSError(f"{what} cannot bind {socket_path}")
    await server.start()
    return server


class UnixGrpcServer(AsyncService):
    """Serves ``register()``'s servicer on ``socket_path``; ``stop()`` also removes the socket."""

    #: names the server in errors
    what: ClassVar[str]
    socket_path: Path
    _server: grpc.aio.Server | None = None

    @abc.abstractmethod
    def register(self, server: grpc.aio.Server) -> None:
        """Add the servicer(s) to ``server``."""

    async def start(self) -> None:
        self._server = await serve_unix(self.socket_path, self.register, self.what)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(None)
            self._server = None
        self.socket_path.unlink(missing_ok=True)
