"""Where the node's container runtime (CRI) listens."""

from __future__ import annotations

from pathlib import Path

#: CRI sockets tried in order when none is configured (dockershim is gone since Kubernetes 1.24)
CRI_SOCKETS = (
    "/run/containerd/containerd.sock",
    "/run/k3s/containerd/containerd.sock",
    "/var/run/cri-dockerd.sock",
    "/var/run/crio/crio.sock",
)


class CriSocketNotFound(RuntimeError):
    """No CRI socket was configured and none of CRI_SOCKETS exists; the message lists them."""


def cri_socket(configured: str | None, root: Path = Path("/")) -> Path:
    """The configured CRI socket, else the first of CRI_SOCKETS present under `root`."""
    if configured:
        return Path(configured)
    for candidate in CRI_SOCKETS:
        path = root / candidate.lstrip("/")
        if path.exists():
            return path
    raise CriSocketNotFound(
        f"no CRI socket found under {root}: tried {', '.join(CRI_SOCKETS)}; set the runtime's "
        "socket with runtimeSocket (env RUNTIME_SOCK, chart value agent.runtimeSocket)"
    )
