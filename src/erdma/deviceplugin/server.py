"""One plugin's gRPC server on its unix socket in the kubelet device-plugins directory.

Owns the socket file: removes stale sockets of its own name pattern, binds a fresh
`<stem>-<millis>.sock`, restricts it to mode 0600 and confirms it accepts connections before
anyone registers it with kubelet (a plugin MUST serve before registering).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from erdma.api.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from erdma.api.names import KUBELET_SOCKET
from erdma.deviceplugin.servicer import DevicePluginServicer

log = logging.getLogger(__name__)

KUBELET_CHECKPOINT = "kubelet_internal_checkpoint"
#: Names kubelet owns in the device-plugins directory; never removed, whatever the stem.
PROTECTED_NAMES = frozenset({KUBELET_SOCKET, KUBELET_CHECKPOINT})
SOCKET_MODE = 0o600
_STEM_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]*$")


def validate_stem(stem: str) -> str:
    """A socket stem must not contain '-' so `<stem>-<digits>.sock` stays unambiguous."""
    if not _STEM_RE.match(stem):
        raise ValueError(
            f"socket_stem {stem!r} is invalid: use letters, digits, '_' or '.', "
            "starting with a letter or digit (no '-' or '/')"
        )
    return stem


def own_socket_pattern(stem: str) -> re.Pattern[str]:
    """Anchored pattern of the socket names this plugin may create (and so may remove)."""
    return re.compile(rf"^{re.escape(validate_stem(stem))}-\d+\.sock$")


def remove_stale_sockets(plugin_dir: Path, stem: str) -> list[str]:
    """Delete leftovers of earlier runs of this plugin; returns the names removed."""
    pattern = own_socket_pattern(stem)
    removed = []
    for entry in os.scandir(plugin_dir):
        if entry.name in PROTECTED_NAMES or not pattern.match(entry.name):
            continue
        try:
            os.unlink(entry.path)
        except FileNotFoundError:
            continue
        removed.append(entry.name)
    if removed:
        log.info("removed stale plugin sockets", extra={"dir": str(plugin_dir), "names": removed})
    return removed


def accepts_connections(path: Path) -> bool:
    """Whether a process accepts connections on the unix socket ``path`` (a live server, not
    a file left behind by one that died)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


async def serve_unix_socket(
    path: Path, servicers: Sequence[tuple[Callable[[Any, Any], None], Any]], what: str
) -> grpc.aio.Server:
    """A started grpc.aio server on a fresh unix socket (mode 0600), checked to accept.

    `servicers` are (add_XServicer_to_server, servicer) pairs; `what` names the socket in
    errors. Kubelet dials the socket the moment it appears, so a server that bound but does
    not accept is stopped and its socket removed rather than left half-started.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    server = grpc.aio.server()
    for add, servicer in servicers:
        add(servicer, server)
    try:
        if server.add_insecure_port(f"unix://{path}") == 0:
            raise OSError(f"cannot bind {what} socket {path}")
        await server.start()
        os.chmod(path, SOCKET_MODE)
        if not accepts_connections(path):
            raise OSError(f"{what} socket {path} does not accept connections")
    except BaseException:
        await server.stop(None)
        path.unlink(missing_ok=True)
        raise
    return server


class PluginServer:
    """A grpc.aio server for one servicer, bound to a new socket on every `start()`."""

    def __init__(self, servicer: DevicePluginServicer, plugin_dir: Path, stem: str) -> None:
        self._servicer = servicer
        self._dir = plugin_dir
        self._stem = validate_stem(stem)
        self._server: grpc.aio.Server | None = None
        self._path: Path | None = None
        self._last_millis = 0

    @property
    def socket_path(self) -> Path | None:
        """The socket currently served, or None when stopped."""
        return self._path

    def _next_name(self) -> str:
        millis = max(int(time.time() * 1000), self._last_millis + 1)
        self._last_millis = millis
        return f"{self._stem}-{millis}.sock"

    async def start(self) -> Path:
        """Stop any previous server, clean stale sockets, serve on a fresh socket; returns it."""
        await self.stop()
        self._dir.mkdir(parents=True, exist_ok=True)
        remove_stale_sockets(self._dir, self._stem)
        path = self._dir / self._next_name()
        servicers = [(pb_grpc.add_DevicePluginServicer_to_server, self._servicer)]
        server = await serve_unix_socket(path, servicers, "device-plugin")
        self._server, self._path = server, path
        log.info("serving device plugin", extra={"socket": str(path)})
        return path

    async def stop(self, grace: float | None = None) -> None:
        """Stop serving and remove the socket file (open streams are cancelled)."""
        server, path = self._server, self._path
        self._server = self._path = None
        if server is not None:
            await server.stop(grace)
        if path is not None:
            path.unlink(missing_ok=True)
