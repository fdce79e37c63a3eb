"""A ``CuttableProxy`` in a process of its own, for benchmarks whose harness is busy.

In a thread of the benchmark process the proxy shares that process's GIL: when the harness
parses a large list or watch stream (one C call that holds the GIL for tens of milliseconds),
every connection through the proxy stalls with it, and the controller behind the proxy sees
slow TLS handshakes that no API server would cause. In its own process the proxy only
competes for the CPU, as a piece of network between two hosts would.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from multiprocessing.connection import Connection

from tests.integration.proxy_support import CuttableProxy

STARTUP_SECONDS = 30


def _serve(target_port: int, conn: Connection) -> None:
    """Child process: run the proxy and carry out "cut" / "start" / "close" from the pipe."""

    async def serve() -> None:
        proxy = CuttableProxy(target_port)
        await proxy.start()
        conn.send(proxy.port)
        while True:
            command = await asyncio.to_thread(conn.recv)
            try:
                if command == "cut":
                    await proxy.cut()
                elif command == "start":
                    await proxy.start()
                elif command == "close":
                    await proxy.close()
                    conn.send(None)
                    return
                conn.send(None)
            except Exception as exc:  # e.g. OSError: the port was taken meanwhile
                conn.send(exc)

    asyncio.run(serve())


class ProxyProcess:
    """The port of a cuttable proxy to ``target_port`` served by a child process."""

    def __init__(self, target_port: int) -> None:
        spawn = multiprocessing.get_context("spawn")
        self._conn, child = spawn.Pipe()
        self._proc = spawn.Process(target=_serve, args=(target_port, child), daemon=True)
        self._proc.start()
        child.close()  # the child's end lives in the child: its exit ends recv with EOFError
        if not self._conn.poll(STARTUP_SECONDS):
            raise RuntimeError(f"proxy process did not start within {STARTUP_SECONDS} s")
        self.port: int = self._conn.recv()

    async def _command(self, command: str) -> None:
        self._conn.send(command)
        error = await asyncio.to_thread(self._conn.recv)
        if error is not None:
            raise error

    async def cut(self) -> None:
        """Stop listening (connects get ECONNREFUSED) and reset every open connection."""
        await self._command("cut")

    async def start(self) -> None:
        """Listen again on the same port; OSError while something else holds it."""
        await self._command("start")

    async def close(self) -> None:
        """Cut, stop the child and wait for it."""
        await self._command("close")
        await asyncio.to_thread(self._proc.join, 10)
