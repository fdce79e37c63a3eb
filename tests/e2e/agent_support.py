"""The real `erdma agent` process, configured as the Helm chart configures it, on a fixture host.

The agent reads the chart's rendered `agent.json` (the ConfigMap the DaemonSet mounts) with the
DaemonSet's own arguments. Only what differs between a fixture host on this machine and a real
node is passed as flags on top, each for a reason:

- `--host-root`: the fixture tree stands for the node's `/sys`, `/dev`, `/proc`;
- `--kubelet-dir`: the tool's kubelet keeps `device-plugins/` and `root/` in its state dir;
- `--no-prepare-node`, `--no-host-namespace`: loading modules would act on this machine's kernel
  (the fixture's drivers are already "loaded");
- `--runtime-socket`, `--cdi-spec-dir`: the tool's containerd socket and the CDI dir it reads;
- `--kubeconfig`, `--node-name`: what the pod's service account and downward API give;
- `--metrics-port 0`: tests run beside other things on this machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from erdma.sim import fakehost
from tests.e2e.kubelet_support import STATE_ROOT, KubeletNode
from tests.helm_support import merge, render

AGENT = "alibabacloud-erdma-agent"
SHARED = "ack-rdma-dp-ds"
VARIANTS_USED = ("default", "gpu", "mlx5")
HOST_IB = Path("/dev/infiniband")
DEVICE_LOCK = STATE_ROOT / "erdma-e2e-devices.lock"
DEVICE_REGISTRY = STATE_ROOT / "erdma-e2e-devices.made"
#: The one value the chart cannot render without: Local mode (Regular mode needs credentials
#: and the controller, which these node tests do not run).
LOCAL_MODE: dict[str, Any] = {"config": {"localERIDiscovery": True}}


def chart_agent(
    values: Mapping[str, Any], daemonset: str = AGENT
) -> tuple[list[str], dict[str, Any], list[dict[str, Any]]]:
    """(container args, agent.json, DeviceClasses) as `helm template` renders them."""
    out = render(merge(LOCAL_MODE, values))
    container = out.container("DaemonSet", daemonset)
    name, text = out.agent_config_file(daemonset)
    args = [str(a) for a in container["args"]]
    return args, {"file": name, "config": json.loads(text)}, out.all("DeviceClass")


class Agent:
    """One agent process on its own fixture host; the host and config survive restarts."""

    def __init__(
        self,
        node: KubeletNode,
        root: Path,
        variant: str = "default",
        values: Mapping[str, Any] | None = None,
        extra_args: tuple[str, ...] = (),
        daemonset: str = AGENT,
    ) -> None:
        self.node = node
        self.root = root
        self.host = fakehost.build(root / "host", variant)
        self.args, rendered, self.device_classes = chart_agent(values or {}, daemonset)
        self.config: dict[str, Any] = rendered["config"]
        config_dir = root / "etc-erdma-agent"
        config_dir.mkdir(parents=True, exist_ok=True)
        self.config_file = config_dir / rendered["file"]
        self.config_file.write_text(json.dumps(self.config))
        self.extra_args = extra_args
        self.log_path = root / "agent.log"
        self.process: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        chart_args = [
            self.config_file.as_posix() if a.endswith(self.config_file.name) else a
            for a in self.args
        ]
        return [
            sys.executable,
            "-m",
            "erdma",
            *chart_args,
            "--host-root",
            str(self.host.root),
            "--kubelet-dir",
            str(self.node.state),
            "--no-prepare-node",
            "--no-host-namespace",
            "--runtime-socket",
            str(self.node.cri_socket),
            "--cdi-spec-dir",
            str(self.node.cdi_dir),
            "--kubeconfig",
            str(self.node.kubeconfig),
            "--node-name",
            self.node.node,
            "--metrics-port",
            "0",
            *self.extra_args,
        ]

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.argv(),
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "NODE_NAME": self.node.node},
            )

    def stop(self) -> None:
        """SIGTERM, as the kubelet stops a DaemonSet pod."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as an OOM kill or a node crash of the container."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_times(self, message: str) -> list[float]:
        """Wall-clock times of the agent's log lines whose message is ``message``."""
        out = []
        for line in self.log.splitlines():
            if message not in line or not line.startswith("{"):
                continue
            entry = json.loads(line)
            if entry.get("msg") == message:
                out.append(datetime.fromisoformat(entry["ts"].replace("Z", "+00:00")).timestamp())
        return out

    def device_numbers(self) -> dict[str, tuple[int, int]]:
        return fixture_device_numbers(self.host.root)


def fixture_device_numbers(root: Path) -> dict[str, tuple[int, int]]:
    """/dev/infiniband/NAME -> (major, minor) of a fixture host's device nodes (its manifest
    records them whether or not they could be made as real nodes)."""
    entries = json.loads((root / "dev/.manifest.json").read_text())
    return {
        str(e["path"]): (int(e["major"]), int(e["minor"]))
        for e in entries
        if str(e["path"]).startswith("/dev/infiniband/")
    }


def all_fixture_device_numbers() -> dict[str, tuple[int, int]]:
    """The device nodes of every fixture variant these tests use."""
    out: dict[str, tuple[int, int]] = {}
    with tempfile.TemporaryDirectory(prefix="erdma-e2e-fixtures-") as tmp:
        for variant in VARIANTS_USED:
            out.update(fixture_device_numbers(fakehost.build(Path(tmp) / variant, variant).root))
    return out


@contextlib.contextmanager
def shared_host_device_nodes(numbers: Mapping[str, tuple[int, int]]) -> Iterator[None]:
    """The fixture's device nodes at their real paths on this machine, for a session.

    containerd resolves a DeviceSpec's host path (and a CDI device node's) in the host's mount
    namespace; there is no RDMA hardware here, so we make the nodes with the fixture's numbers
    (as the kubelet tool's selftest does). Sessions may overlap: each holds a shared lock while
    it runs, what was made is recorded, and the last session out removes it.
    """
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(DEVICE_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made: list[Path] = []
        if not HOST_IB.exists():
            HOST_IB.mkdir()
            made.append(HOST_IB)
        for path, (major, minor) in numbers.items():
            if not os.path.lexists(path):
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
                made.append(Path(path))
        with open(DEVICE_REGISTRY, "a") as registry:
            registry.writelines(f"{p}\n" for p in made)
        fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            yield
        finally:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass  # another session still runs pods with them; the last one removes them
            else:
                _remove_recorded()


def _remove_recorded() -> None:
    """Remove every node (then directory) any session recorded as made by it."""
    recorded = DEVICE_REGISTRY.read_text().split() if DEVICE_REGISTRY.exists() else []
    for path in sorted(map(Path, set(recorded)), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            path.rmdir() if path.is_dir() else path.unlink()
    DEVICE_REGISTRY.unlink(missing_ok=True)
