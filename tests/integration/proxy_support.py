"""A loopback TCP proxy a test can cut, to give a client real API-server outages.

Cutting closes the listening port (new connections are refused, as when the API server
restarts) and resets open connections; nothing is mocked, the errors are whatever the HTTP
client raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, Protocol

import yaml

from tests.fakes.kubeapi import KubeApiServer


class CuttableProxy:
    """A TCP forwarder on loopback whose port can be made to refuse connections, and reopened.

    It runs its own event loop in a thread, like a piece of network outside the process: kopf,
    when the controller's operator is stopped, cancels every task of its loop created after it
    started, which would include the proxy's connection handlers.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    async def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def start(self) -> None:
        """Listen (again, on the same port after a cut)."""
        await self._call(self._start())

    async def cut(self) -> None:
        """Stop listening (connects now get ECONNREFUSED) and reset every open connection."""
        await self._call(self._cut())

    async def close(self) -> None:
        """Cut, wait for every connection handler to finish, and stop the thread."""
        await self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.to_thread(self._thread.join)
        self._loop.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._open):
            writer.transport.abort()

    async def _close(self) -> None:
        await self._cut()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        handler.add_done_callback(self._handlers.discard)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._open |= {writer, up_writer}
        pipes = [
            asyncio.create_task(self._pipe(reader, up_writer)),
            asyncio.create_task(self._pipe(up_reader, writer)),
        ]
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pipes:
                task.cancel()
            for w in (writer, up_writer):
                self._open.discard(w)
                w.transport.abort()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()


class Proxy(Protocol):
    """A proxy in front of the test server: this one, or one in a process of its own."""

    port: int


def proxied_kubeconfig(kube_api: KubeApiServer, proxy: Proxy) -> dict[str, Any]:
    """The test server's kubeconfig, with the server address replaced by the proxy's."""
    conf: dict[str, Any] = yaml.safe_load(kube_api.kubeconfig.read_text())
    for cluster in conf["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    return conf
