"""Socket names of one driver instance, so two agents can serve the driver side by side.

During a rolling update the new agent starts before the old one stops (kubelet 1.33+ keeps
every registered instance of a DRA driver and uses the newest, falling back to another when it
goes). That works only when each instance has sockets of its own, as the upstream
kubeletplugin helper's `RollingUpdate` option gives them: had the new agent taken over the
old one's file, the kubelet could see that file go away and unregister the driver, and could
not fall back to the old agent if the new one failed. So each process picks an instance ID and
serves `plugins_registry/<driver>-<id>-reg.sock` and `plugins/<driver>/dra-<id>.sock`.

A socket nobody listens on any more (an agent killed with SIGKILL, or one of a version that
used the fixed names `<driver>-reg.sock` and `dra.sock`) is removed when the next agent
starts: a connection to it is refused. A socket that accepts connections belongs to a running
agent and is left alone.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from erdma.deviceplugin.server import accepts_connections
from erdma.dra.names import PLUGINS_DIR, PLUGINS_REGISTRY_DIR

#: the instance part of a socket name: 12 hex digits of a random UUID
_ID = "[0-9a-f]{12}"


def new_instance_id() -> str:
    """Unique per process: a restarted container (the same pod) gets a new one too."""
    return uuid.uuid4().hex[:12]


def instance_sockets(kubelet_dir: Path, driver: str, instance: str) -> tuple[Path, Path]:
    """(DRA socket, registration socket) of one instance of `driver`."""
    if not re.fullmatch(_ID, instance):
        raise ValueError(f"DRA instance ID {instance!r}: use 12 lowercase hex digits")
    return (
        kubelet_dir / PLUGINS_DIR / driver / f"dra-{instance}.sock",
        kubelet_dir / PLUGINS_REGISTRY_DIR / f"{driver}-{instance}-reg.sock",
    )


def _instance_socket_patterns(driver: str) -> list[tuple[str, re.Pattern[str]]]:
    """(directory under the kubelet dir, name pattern) of every instance's sockets, the
    fixed names of earlier versions included."""
    return [
        (f"{PLUGINS_DIR}/{driver}", re.compile(rf"dra(-{_ID})?\.sock")),
        (PLUGINS_REGISTRY_DIR, re.compile(rf"{re.escape(driver)}(-{_ID})?-reg\.sock")),
    ]


def remove_stale(kubelet_dir: Path, driver: str) -> list[Path]:
    """Remove the sockets of `driver`'s instances that nobody listens on; the removed paths."""
    removed = []
    for directory, pattern in _instance_socket_patterns(driver):
        folder = kubelet_dir / directory
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if pattern.fullmatch(path.name) and path.is_socket() and not accepts_connections(path):
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed
