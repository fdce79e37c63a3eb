"""The real kubelet (shared/tools/kubelet), the API server it reports to, and polling helpers.

One kubelet per test session: starting it costs seconds, and a node outlives its plugins and
pods anyway, as on a real cluster. Everything here talks to real processes: the kubelet's
start.sh/stop.sh, the API server over HTTPS with the admin client certificate, files the kubelet
writes (pod logs, its device checkpoint).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests.fakes.kubeapi import free_port, shared_dir

T = TypeVar("T")
TOOLS = shared_dir() / "tools"
KUBELET_TOOL = TOOLS / "kubelet"
SCHEDULER_TOOL = TOOLS / "kube-scheduler"
#: Our own state dirs and node names (never the selftest's), one slot per concurrent session.
STATE_ROOT = Path("/var/tmp/kubelet-test")
SLOTS = 8
DEADLINE = 60.0
#: measured figures go here (and to stdout): reported, never asserted against a bound
MEASUREMENTS = STATE_ROOT / "erdma-e2e-measurements.txt"
#: named on even where the kubelet's default has it on (beta in 1.36), so a test relying on
#: them never depends on a release's default: DRA device health in the pod's status
FEATURE_GATES = "ResourceHealthStatus=true,ResourceHealthStatusMessage=true"


def record(text: str) -> None:
    """Report a measured figure: printed, and appended to ``MEASUREMENTS`` with the time."""
    print(text)
    with open(MEASUREMENTS, "a") as out:
        out.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n")


def wait_for(check: Callable[[], T | None], what: str, timeout: float = DEADLINE) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` at the deadline.

    Deadlines are generous on purpose: they only bound a hang, they are never the assertion.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


@contextlib.contextmanager
def node_slot() -> Iterator[tuple[Path, str]]:
    """(state dir, node name) of the first slot no other test session holds, for this session.

    Two sessions on one machine (a full suite run beside `make e2e`) must not share a state
    dir: the kubelet tool's stop.sh of one would stop the other's kubelet and containerd. The
    lock goes with the process, so a killed session frees its slot; the slot's containerd setup
    (engines/) is kept for the next session that takes it.
    """
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    for slot in range(SLOTS):
        lock = open(STATE_ROOT / f"erdma-e2e-{slot}.lock", "a")  # noqa: SIM115 - held
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        try:
            yield STATE_ROOT / f"erdma-e2e-{slot}", f"erdma-e2e-node-{slot}"
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()
        return
    raise RuntimeError(f"all {SLOTS} e2e node slots under {STATE_ROOT} are held by other sessions")


class Api:
    """A small JSON client for the API server, from a kubeconfig with certificate files.

    kube-testserver's certificate names `localhost` while we connect to 127.0.0.1, so the CA is
    checked but not the host name (the kubeconfig's `tls-server-name` says the same).
    """

    def __init__(self, kubeconfig: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        self.server = str(cluster["server"])
        self.context = ssl.create_default_context(cafile=cluster["certificate-authority"])
        self.context.check_hostname = False
        self.context.load_cert_chain(user["client-certificate"], user["client-key"])

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        """The decoded answer; None for 404 (gone is an answer in these tests)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=30) as reply:
                return json.loads(reply.read() or b"null")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise AssertionError(f"{method} {path}: {exc.code} {exc.read().decode()}") from exc

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def create(self, path: str, body: Mapping[str, Any]) -> Any:
        return self.request("POST", path, dict(body))

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def merge_patch(self, path: str, body: Mapping[str, Any]) -> Any:
        return self.request("PATCH", path, dict(body), "application/merge-patch+json")

    def apply_object(self, obj: Mapping[str, Any]) -> Any:
        """Create a cluster-scoped or namespaced object of the kinds these tests install."""
        api = obj["apiVersion"]
        prefix = "/api/v1" if api == "v1" else f"/apis/{api}"
        plural = {"DeviceClass": "deviceclasses", "ResourceClaim": "resourceclaims"}[obj["kind"]]
        ns = obj["metadata"].get("namespace")
        path = f"{prefix}/namespaces/{ns}/{plural}" if ns else f"{prefix}/{plural}"
        return self.create(path, obj)


def read_env(path: Path) -> dict[str, str]:
    """start.sh's `env` file: KEY=VALUE lines."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key: value for key, value in pairs if not key.startswith("#")}


@dataclass
class KubeletNode:
    """One running kubelet (start.sh in the foreground) with containerd, on our own ports."""

    kubeconfig: Path
    state: Path
    node: str
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[str] | None = None
    port: int = field(default_factory=free_port)
    healthz_port: int = field(default_factory=free_port)

    def start(self) -> None:
        """Start (or restart, same STATE_DIR) the kubelet; returns once /healthz answers."""
        env = dict(
            os.environ,
            KUBECONFIG=str(self.kubeconfig),
            KUBELET_NODE_NAME=self.node,
            KUBELET_PORT=str(self.port),
            KUBELET_HEALTHZ_PORT=str(self.healthz_port),
            KUBELET_FEATURE_GATES=",".join(
                g for g in (FEATURE_GATES, os.environ.get("KUBELET_FEATURE_GATES")) if g
            ),
        )
        self.process = start_tool(KUBELET_TOOL / "start.sh", self.state, env, "kubelet")
        self.env = read_env(self.state / "env")

    def stop_kubelet(self) -> None:
        """SIGTERM to start.sh: the kubelet stops, pods keep running in containerd."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=60)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()

    def stop_all(self) -> None:
        """stop.sh: kubelet, every pod container, containerd, mounts (caches kept)."""
        subprocess.run(
            ["bash", str(KUBELET_TOOL / "stop.sh"), str(self.state)],
            capture_output=True,
            timeout=120,
            check=False,
        )
        self.stop_kubelet()
        end_leftover_shims(self.state / "engines")

    @staticmethod
    def reset(state: Path) -> None:
        """Stop what an earlier session may have left and forget its kubelet state, keeping
        the containerd setup (engines/: packages, images, venv; 30 s to rebuild)."""
        subprocess.run(
            ["bash", str(KUBELET_TOOL / "stop.sh"), str(state)],
            capture_output=True,
            timeout=120,
            check=False,
        )
        if state.is_dir():
            for entry in state.iterdir():
                if entry.name != "engines":
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry, ignore_errors=True)
                    else:
                        entry.unlink(missing_ok=True)
        state.mkdir(parents=True, exist_ok=True)
        # the agent takes one kubelet root; the tool keeps device-plugins/ beside root/
        for name in ("pod-resources", "plugins_registry", "plugins"):
            (state / "root" / name).mkdir(parents=True, exist_ok=True)
            (state / name).symlink_to(state / "root" / name)

    @property
    def device_plugins(self) -> Path:
        return Path(self.env["KUBELET_DEVICE_PLUGINS_DIR"])

    @property
    def kubelet_sock(self) -> Path:
        return self.device_plugins / "kubelet.sock"

    @property
    def pod_resources_socket(self) -> Path:
        return Path(self.env["KUBELET_POD_RESOURCES_SOCKET"])

    @property
    def cri_socket(self) -> Path:
        return Path(self.env["KUBELET_CRI_ENDPOINT"])

    @property
    def cdi_dir(self) -> Path:
        return Path(self.env["KUBELET_CDI_DIR"])

    @property
    def log(self) -> str:
        path = self.state / "kubelet.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def checkpoint(self) -> dict[str, Any]:
        """The device manager's checkpoint: which pod holds which device IDs."""
        return dict(json.loads((self.device_plugins / "kubelet_internal_checkpoint").read_text()))


def node_resource(api: Api, node: str, resource: str) -> tuple[int, int] | None:
    """(capacity, allocatable) of ``resource`` in the Node's status, written by the kubelet."""
    obj = api.get(f"/api/v1/nodes/{node}")
    if not obj:
        return None
    status = obj.get("status", {})
    capacity = status.get("capacity", {}).get(resource)
    allocatable = status.get("allocatable", {}).get(resource)
    if capacity is None or allocatable is None:
        return None
    return quantity(capacity), quantity(allocatable)


def quantity(text: str) -> int:
    """An integer quantity as the API server writes it (1000 comes back as `1k`)."""
    factors = {"k": 10**3, "M": 10**6, "G": 10**9}
    if text and text[-1] in factors:
        return int(text[:-1]) * factors[text[-1]]
    return int(text)


def end_leftover_shims(engines: Path) -> None:
    """SIGKILL the containerd shims of ``engines`` that outlive its containerd.

    stop.sh stops the pods and containerd, but a shim whose container already exited can stay
    behind, re-parented to init, one per pod; a suite run every few minutes would pile them up.
    """
    prefix = str(engines) + "/"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            exe = os.readlink(proc / "exe")
        except OSError:
            continue
        if exe.startswith(prefix) and exe.endswith("/containerd-shim-runc-v2"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


def start_tool(script: Path, state: Path, env: dict[str, str], what: str) -> subprocess.Popen[str]:
    """Run a shared tool's start.sh on ``state``; it prints one line once its program is up
    and stays in the foreground. Its stderr goes to ``<state>.start.log``."""
    with open(state.parent / f"{state.name}.start.log", "a") as log:
        process = subprocess.Popen(
            ["bash", str(script), str(state)],
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
        )
    assert process.stdout is not None
    if not process.stdout.readline().strip():
        process.wait(timeout=60)
        raise RuntimeError(f"{what} did not start; see {log.name} and {state}")
    return process


@dataclass
class Scheduler:
    """The real kube-scheduler (shared/tools/kube-scheduler), started on first use."""

    kubeconfig: Path
    state: Path
    process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), KSCHED_PORT=str(free_port()))
        self.process = start_tool(SCHEDULER_TOOL / "start.sh", self.state, env, "kube-scheduler")

    def stop(self) -> None:
        subprocess.run(
            ["bash", str(SCHEDULER_TOOL / "stop.sh"), str(self.state)],
            capture_output=True,
            timeout=60,
            check=False,
        )
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                self.process.wait(timeout=30)
            if self.process.stdout is not None:
                self.process.stdout.close()
