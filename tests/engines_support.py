"""Real container engines for the engine tests: the kit's Podman, Docker and containerd CRI.

Every engine test needs the same three things: the engines `setup.sh` of
../shared/tools/container-engines started (or a reason to skip that names what is missing), a
way to run a container and read back what it saw (device nodes with major:minor, what open()
said, network namespace, memlock, env), and a CRI ContainerConfig built from a device plugin's
Allocate answer the way kubelet builds it.

Only the stdlib is imported at module level: `python engines_support.py cri SOCKET` runs in the
kit's own venv (its grpcio and full CRI stubs), which has neither pytest nor erdma. The CRI
client is a separate process because the project's CRI stubs (a subset of package runtime.v1)
and the kit's full ones cannot share one protobuf descriptor pool.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
KIT_DIR = Path(os.environ.get("ENGINE_KIT", REPO.parent / "shared/tools/container-engines"))
IMAGE = "docker.io/local/busybox:e"
KIT_SPEC = "aliyun.com-erdma.yaml"  # the spec container-engines' setup.sh writes
ENGINES = ("podman", "docker", "containerd")
#: what busybox prints for a failed open(), by errno name
ERRNO = {
    "No such device or address": "ENXIO",  # the device cgroup let it through; no driver
    "Operation not permitted": "EPERM",  # the device cgroup refused it
    "No such device": "ENODEV",  # misc char device (rdma_cm) without a driver
    "No such file or directory": "ENOENT",
    "Permission denied": "EACCES",
}


def state_dir() -> Path:
    return Path(os.environ.get("ENGINE_STATE", "/var/tmp/container-engines"))


@dataclass(frozen=True)
class Kit:
    """The engines setup.sh started: their environment (PATH, DOCKER_HOST, ...) and limits."""

    state: Path
    env: dict[str, str]
    #: CAP_SYS_RESOURCE: without it no rlimit can go above the hard limit (memlock=-1 fails)
    sysres: bool

    @property
    def cdi_dir(self) -> Path:
        """The CDI spec directory dockerd and containerd read (Podman via `podman-cdi`)."""
        return self.state / "cdi"

    @property
    def uverbs0(self) -> Path:
        return self.state / "dev/infiniband/uverbs0"

    def missing(self, engine: str) -> str | None:
        """Why `engine` cannot be used now, or None."""
        if engine == "podman":
            if "CONTAINERS_CONF" not in self.env:
                return f"podman was not set up by the kit (no CONTAINERS_CONF in {self.state}/env)"
            return self._answers("podman", ["podman", "version", "-f", "{{.Client.Version}}"])
        if engine == "docker":
            if "DOCKER_HOST" not in self.env:
                return f"docker was not set up by the kit (no DOCKER_HOST in {self.state}/env)"
            return self._answers("dockerd", ["docker", "version", "-f", "{{.Server.Version}}"])
        if engine == "containerd":
            sock = self.env.get("CONTAINERD_ADDRESS", "")
            if not sock or not Path(sock).is_socket():
                return f"containerd CRI socket {sock or '(CONTAINERD_ADDRESS unset)'} is absent"
            if not (self.state / "cri/api_pb2_grpc.py").exists():
                return f"the kit's CRI client stubs are missing under {self.state}/cri"
            # a socket left by a containerd that is gone (the machine restarted) answers nothing
            return self._answers("containerd", ["ctr", "-a", sock, "version"])
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")

    def _answers(self, what: str, argv: list[str]) -> str | None:
        try:
            done = self.run(argv, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{what} does not answer: {exc}"
        if done.returncode != 0:
            return f"{what} does not answer: {(done.stderr or done.stdout).strip()[:200]}"
        return None

    def version(self, engine: str) -> str:
        argv = {
            "podman": ["podman", "version", "-f", "{{.Client.Version}}"],
            "docker": ["docker", "version", "-f", "{{.Server.Version}}"],
            "containerd": ["ctr", "-a", self.env.get("CONTAINERD_ADDRESS", ""), "version"],
        }[engine]
        out = self.run(argv).stdout
        if engine == "containerd":
            found = re.findall(r"Version:\s+(\S+)", out)
            return found[-1] if found else "?"
        return out.strip()

    def run(
        self, argv: Sequence[str], *, timeout: float = 60, stdin: str | None = None, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """Run a command with the kit's environment; never raises on a non-zero exit."""
        return subprocess.run(
            list(argv),
            env={**self.env, **env},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def erdma(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """The real `erdma` program, so `run` really execs the engine (exit code and all)."""
        return self.run([sys.executable, "-m", "erdma", *args], timeout=timeout)

    def podman_run_options(self) -> list[str]:
        """Podman drops containers.conf `default_ulimits` once any --ulimit is given and falls
        back to nofile=1048576, which this sandbox (no CAP_SYS_RESOURCE) refuses: repeat them."""
        if self.sysres:
            return []
        conf = Path(self.env.get("CONTAINERS_CONF", "/nonexistent")).read_text()
        match = re.search(r"default_ulimits\s*=\s*\[(.*?)\]", conf)
        limits = re.findall(r'"([^"]+)"', match.group(1)) if match else []
        return [arg for limit in limits for arg in ("--ulimit", limit)]


def find_kit() -> Kit | str:
    """The running kit, or the reason there is none (not root, never set up)."""
    if os.geteuid() != 0:
        return (
            f"engine tests need root (setup.sh, mknod'd device nodes, device cgroups); "
            f"running as uid {os.geteuid()}"
        )
    state = state_dir()
    env_file = state / "env"
    if not env_file.is_file():
        hint = f"{KIT_DIR}/setup.sh" if (KIT_DIR / "setup.sh").exists() else "the engine kit"
        return (
            f"container engines not set up: {env_file} is missing (run {hint} as root, or .ci/run)"
        )
    dumped = subprocess.run(
        ["bash", "-c", '. "$0" && env -0', str(env_file)], capture_output=True, check=False
    )
    if dumped.returncode != 0:
        return f"{env_file} cannot be sourced: {dumped.stderr.decode(errors='replace').strip()}"
    env = dict(item.split("=", 1) for item in dumped.stdout.decode().split("\0") if "=" in item)
    caps = (state / "caps").read_text() if (state / "caps").exists() else ""
    return Kit(state, env, sysres="SYSRES=1" in caps)


def require(*engines: str) -> Kit:
    """The kit, with every engine named usable; otherwise skip, saying what is missing."""
    import pytest

    kit = find_kit()
    if isinstance(kit, str):
        pytest.skip(kit)
    for engine in engines:
        reason = kit.missing(engine)
        if reason:
            pytest.skip(f"{engine}: {reason}")
    return kit


@contextlib.contextmanager
def own_cdi_dir(kit: Kit) -> Iterator[Path]:
    """The CDI directory dockerd and containerd read, to this test alone for a while.

    Two spec files defining our kind (the kit's aliyun.com-erdma.yaml beside a test's .json, or
    a spec a killed run left under any name) make every ``aliyun.com/erdma`` device
    unresolvable. So every spec of our kind is taken out on entry, under a lock that every engine
    test process takes; on exit whatever the test wrote is removed and only the kit's own spec
    is put back: nothing depends on what another run left there.
    """
    with open(kit.state / ".erdma-engine-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        saved = {}
        for path in _our_specs(kit.cdi_dir):
            if path.name == KIT_SPEC:
                saved[path.name] = path.read_bytes()
            path.unlink()
        try:
            yield kit.cdi_dir
        finally:
            for path in [*_our_specs(kit.cdi_dir), *kit.cdi_dir.glob(".aliyun.com-erdma.*")]:
                path.unlink(missing_ok=True)
            for name, data in saved.items():
                tmp = kit.cdi_dir / f".restore-{name}.tmp"
                tmp.write_bytes(data)
                os.replace(tmp, kit.cdi_dir / name)


def _our_specs(cdi_dir: Path) -> list[Path]:
    """The spec files in ``cdi_dir`` that define devices of our kind, whatever their name."""
    from erdma.cdi import CLASS, VENDOR  # here: this file also runs as a script of the kit's venv

    return [
        path
        for path in sorted(cdi_dir.iterdir())
        if path.suffix in (".yaml", ".json") and f"{VENDOR}/{CLASS}" in path.read_text()
    ]


# -- what a container saw ---------------------------------------------------------------
def probe_script(mknod: Sequence[tuple[int, int]] = ()) -> str:
    """A busybox sh script listing /dev/infiniband with major:minor, opening each node O_RDWR.

    `mknod` nodes are made in the container's /tmp first: opening one that the engine did not
    map shows whether the device cgroup refuses it (EPERM) or lets it through (ENXIO).
    """
    made = " ".join(f"{major}:{minor}" for major, minor in mknod)
    return f"""mkdir -p /tmp/p
for mm in {made}; do mknod /tmp/p/c${{mm%:*}}_${{mm#*:}} c ${{mm%:*}} ${{mm#*:}}; done
for f in /dev/infiniband/* /tmp/p/*; do
  [ -e "$f" ] || continue
  echo "node $f $(stat -c %t:%T "$f")"
  if (exec 3<>"$f") 2>/tmp/err; then echo "open $f ok"; else echo "open $f $(cat /tmp/err)"; fi
done
echo "netns $(readlink /proc/self/ns/net)"
echo "memlock $(ulimit -l)"
env | grep -E '^(SMCR_PNET|ERDMA_|NCCL_)' | sed 's/^/env /'
true"""


@dataclass
class Probe:
    """What `probe_script` printed, parsed."""

    nodes: dict[str, tuple[int, int]] = field(default_factory=dict)
    opens: dict[str, str] = field(default_factory=dict)
    netns: str | None = None
    memlock: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    raw: str = ""

    @classmethod
    def parse(cls, text: str) -> Probe:
        probe = cls(raw=text)
        for line in text.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "node":
                path, _, hexed = rest.rpartition(" ")
                major, minor = (int(x, 16) for x in hexed.split(":"))
                probe.nodes[path] = (major, minor)
            elif kind == "open":
                path, _, outcome = rest.partition(" ")
                message = outcome.rsplit(": ", 1)[-1].strip()
                probe.opens[path] = ERRNO.get(message, message)
            elif kind == "netns":
                probe.netns = rest
            elif kind == "memlock":
                probe.memlock = rest
            elif kind == "env":
                key, _, value = rest.partition("=")
                probe.env[key] = value
        return probe

    def infiniband(self) -> dict[str, tuple[int, int]]:
        return {p: mm for p, mm in self.nodes.items() if p.startswith("/dev/infiniband/")}

    def made(self, major: int, minor: int) -> str:
        return f"/tmp/p/c{major}_{minor}"


def host_netns() -> str:
    return os.readlink("/proc/self/ns/net")


# -- kubelet's side of the CRI ----------------------------------------------------------
def kubelet_container_config(allocation: Mapping[str, Any], node_root: Path) -> dict[str, Any]:
    """The CRI ContainerConfig fields kubelet fills from one ContainerAllocateResponse.

    `allocation` is the response as a dict with proto field names. Field for field as kubelet
    does it: envs -> envs, devices -> devices, mounts -> mounts, annotations -> annotations,
    cdi_devices -> CDI_devices. One difference, because the simulated node is a fixture tree
    and not this machine: kubelet runs on the node, so a host path P there is `node_root`/P
    here. CDI names and annotations are passed unchanged.
    """

    def on_node(path: str) -> str:
        return str(node_root / path.lstrip("/"))

    return {
        "envs": [{"key": k, "value": v} for k, v in sorted(allocation.get("envs", {}).items())],
        "devices": [
            {
                "container_path": d["container_path"],
                "host_path": on_node(d["host_path"]),
                "permissions": d.get("permissions", "rwm"),
            }
            for d in allocation.get("devices", [])
        ],
        "mounts": [
            {
                "container_path": m["container_path"],
                "host_path": on_node(m["host_path"]),
                "readonly": m.get("read_only", False),
            }
            for m in allocation.get("mounts", [])
        ],
        "annotations": dict(allocation.get("annotations", {})),
        "CDI_devices": [{"name": d["name"]} for d in allocation.get("cdi_devices", [])],
    }


def cri_run(
    kit: Kit, config: Mapping[str, Any], command: Sequence[str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run one container through containerd's CRI (a pod sandbox first, as kubelet does)."""
    python = kit.state / "venv/bin/python"
    request = json.dumps({"config": config, "command": list(command), "image": IMAGE})
    return kit.run(
        [str(python), __file__, "cri", kit.env["CONTAINERD_ADDRESS"]],
        stdin=request,
        timeout=timeout,
        PYTHONPATH=str(kit.state / "cri"),
    )


def _cri_main(socket: str) -> int:  # pragma: no cover - runs in the kit's venv
    """Read {config, command, image} on stdin, run it, print its output, exit with its code."""
    import tempfile

    import api_pb2 as pb  # type: ignore[import-not-found]
    import api_pb2_grpc as rpc  # type: ignore[import-not-found]
    import grpc
    from google.protobuf import json_format  # type: ignore[import-untyped]

    request = json.load(sys.stdin)
    runtime = rpc.RuntimeServiceStub(grpc.insecure_channel(f"unix://{socket}"))
    uid = uuid.uuid4().hex[:8]
    logs = tempfile.mkdtemp(prefix="erdma-cri-")
    host = pb.NamespaceOption(network=pb.NODE, pid=pb.CONTAINER, ipc=pb.POD)
    sandbox = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=f"erdma-{uid}", uid=uid, namespace="default"),
        log_directory=logs,
        linux=pb.LinuxPodSandboxConfig(
            security_context=pb.LinuxSandboxSecurityContext(namespace_options=host)
        ),
    )
    config = json_format.ParseDict(request["config"], pb.ContainerConfig())
    config.metadata.name = "c"
    config.image.image = request["image"]
    config.command.extend(request["command"])
    config.log_path = "c.log"
    config.linux.security_context.namespace_options.CopyFrom(host)
    pod = None
    try:
        pod = runtime.RunPodSandbox(pb.RunPodSandboxRequest(config=sandbox)).pod_sandbox_id
        created = runtime.CreateContainer(
            pb.CreateContainerRequest(pod_sandbox_id=pod, config=config, sandbox_config=sandbox)
        )
        runtime.StartContainer(pb.StartContainerRequest(container_id=created.container_id))
        status = None
        for _ in range(300):
            status = runtime.ContainerStatus(
                pb.ContainerStatusRequest(container_id=created.container_id)
            ).status
            if status.state == pb.CONTAINER_EXITED:
                break
            time.sleep(0.05)
        time.sleep(0.1)
        with open(os.path.join(logs, "c.log")) as handle:
            for line in handle:  # "<time> <stream> <tag> <message>"
                print(line.rstrip("\n").split(" ", 3)[3])
        return status.exit_code if status is not None else 125
    except grpc.RpcError as exc:
        print(f"CRI error: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 125
    finally:
        if pod:
            runtime.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=pod))
            runtime.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=pod))


if __name__ == "__main__" and sys.argv[1:2] == ["cri"]:  # pragma: no cover
    sys.exit(_cri_main(sys.argv[2]))
