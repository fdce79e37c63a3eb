"""The image `make image` builds, run in the real Docker engine of the engine kit.

What a cluster runs is this image, not the virtualenv: a wheel that lacks a module, a shared
library the base lacks (grpcio's libstdc++), a file only root can read or a program that writes
to its root file system shows up here and nowhere else. The image is built once per session by
scripts/image.py, which reuses an image built from the same inputs (a hash over the locks, the
Dockerfile and the project's wheel), so a warm run costs seconds.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from lightkube import AsyncClient

from erdma.api.names import ERDMA_RESOURCE
from erdma.sim import fakehost
from erdma.sim.kubelet import FakeKubelet
from tests.engines_support import REPO, Kit, require
from tests.fakes.ecs import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET
from tests.fakes.ecs.client import GPU_TWO_CARDS
from tests.fakes.ports import free_port
from tests.integration.controller_support import FAST, add_node, eventually, ready_device
from tests.waiting import until

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]
pytestmark = pytest.mark.root
SCRIPT = REPO / "scripts/image.py"
#: not the release tag, so a test run never retags what `make image` built from another tree
TAG = "localhost/erdma-k8s/erdma:test"
#: the size docs/install.md promises
MAX_BYTES = 200_000_000


@pytest.fixture(scope="module")
def kit() -> Kit:
    return require("docker")


@pytest.fixture(scope="module")
def image(kit: Kit, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The image's ID, built (or found by its inputs) by the same script as `make image`."""
    if shutil.which("mmdebstrap") is None:
        pytest.skip("mmdebstrap is not installed (apt-get install mmdebstrap; .ci/run does)")
    iidfile = tmp_path_factory.mktemp("image") / "iid"
    done = kit.run(
        [sys.executable, str(SCRIPT), "build", "--tag", TAG, "--iidfile", str(iidfile)],
        timeout=1800,
    )
    assert done.returncode == 0, f"image build failed:\n{done.stdout}\n{done.stderr}"
    return iidfile.read_text().strip()


def docker_run(kit: Kit, image: str, *args: str, options: tuple[str, ...] = ()) -> str:
    """`docker run --rm` with no network and a read-only root file system, as the chart runs
    every container; the program's output, which must exit 0."""
    argv = ["docker", "run", "--rm", "--network=none", "--read-only", *options, image, *args]
    done = kit.run(argv, timeout=180)
    assert done.returncode == 0, f"{' '.join(argv)}: rc={done.returncode}\n{done.stdout}\n" + (
        done.stderr
    )
    return done.stdout


def test_help_names_every_program_and_the_image_runs_as_65532(kit: Kit, image: str) -> None:
    """`docker run IMAGE` shows the help, which loads every subcommand and so every import: a
    module or shared library missing from the image fails here."""
    said = docker_run(kit, image)
    for program in ("agent", "controller", "driver", "smcr-init", "devices", "doctor"):
        assert f"\n  {program} " in said, said
    config = json.loads(kit.run(["docker", "image", "inspect", image]).stdout)[0]["Config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["erdma"]


def test_image_stays_within_its_documented_size(kit: Kit, image: str) -> None:
    """Every node pulls it: a dependency that grows it past the budget is a decision to make,
    not something to find out from a slow rollout."""
    size = int(kit.run(["docker", "image", "inspect", "-f", "{{.Size}}", image]).stdout)
    assert size <= MAX_BYTES, f"the image is {size / 1e6:.1f} MB; docs/install.md says <= 200"


def test_devices_of_a_read_only_host_match_what_the_host_side_sees(
    kit: Kit, image: str, tmp_path: Path
) -> None:
    """`erdma devices --root /host` in the image, as documented for looking at a node, says
    exactly what the same program says outside it."""
    fakehost.build(tmp_path, "default")
    tmp_path.chmod(0o755)  # as a host's / is: readable by the image's default user, 65532
    inside = docker_run(
        kit, image, "devices", "--root", "/host", options=("-v", f"{tmp_path}:/host:ro")
    )
    outside = subprocess.run(
        [sys.executable, "-m", "erdma", "devices", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert inside == outside
    assert "erdma_0" in inside and "/dev/infiniband/uverbs0(231:192)" in inside


@pytest.fixture
def container_name(kit: Kit) -> Iterator[str]:
    """A name for one detached container, removed afterwards whatever happened."""
    name = f"erdma-image-test-{uuid.uuid4().hex[:8]}"
    yield name
    kit.run(["docker", "rm", "-f", name])


def logs(kit: Kit, name: str) -> str:
    """What the container printed, its last 4000 characters."""
    done = kit.run(["docker", "logs", name])
    return (done.stdout + done.stderr)[-4000:]


def stop_cleanly(kit: Kit, name: str) -> None:
    """`docker stop` (SIGTERM, as the kubelet sends it): exit code 0 and no traceback."""
    kit.run(["docker", "stop", "-t", "20", name], timeout=60)
    code = kit.run(["docker", "inspect", "-f", "{{.State.ExitCode}}", name]).stdout.strip()
    said = logs(kit, name)
    assert code == "0", f"exit code {code}:\n{said}"
    assert "Traceback" not in said, said


async def test_agent_in_the_image_serves_kubelet_over_the_mounted_socket_directory(
    kit: Kit, image: str, short_root: Path, container_name: str
) -> None:
    """The agent as the DaemonSet runs it (root, read-only root file system, the host's /sys
    and /dev read-only, the kubelet directory mounted): it registers with the kubelet on the
    host side of the mount, lists both devices' slots and answers Allocate."""
    host, kubelet_dir = short_root / "host", short_root / "kubelet"
    fakehost.build(host, "default")
    async with FakeKubelet(kubelet_dir / "device-plugins") as kubelet:
        started = kit.run(
            [
                "docker",
                "run",
                "-d",
                "--name",
                container_name,
                "--network=none",
                "--read-only",
                "--user",
                "0:0",
                "-v",
                f"{host}:/host:ro",
                "-v",
                f"{kubelet_dir}:/var/lib/kubelet",
                image,
                "agent",
                "--host-root",
                "/host",
                "--kubelet-dir",
                "/var/lib/kubelet",
                "--metrics-port",
                "0",
                "--no-prepare-node",
                "--local-eri-discovery",
                "--slots-per-device",
                "2",
            ]
        )
        assert started.returncode == 0, started.stderr

        try:
            await kubelet.wait_for(
                lambda: kubelet.latest(ERDMA_RESOURCE) is not None,
                120,
                f"{ERDMA_RESOURCE} registered and listed",
            )
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; agent log:\n{logs(kit, container_name)}") from None
        listed = kubelet.latest(ERDMA_RESOURCE)
        assert listed is not None and len(listed) == 4, listed  # 2 devices x 2 slots
        assert set(listed.values()) == {"Healthy"}
        answer = await kubelet.allocate(ERDMA_RESOURCE, [sorted(listed)[0]])
        paths = {d.container_path for d in answer.container_responses[0].devices}
        assert "/dev/infiniband/rdma_cm" in paths and paths & {
            "/dev/infiniband/uverbs0",
            "/dev/infiniband/uverbs1",
        }, paths
        stop_cleanly(kit, container_name)


def readable_kubeconfig(source: Path, dest: Path) -> Path:
    """The API server's kubeconfig and the certificate files it names, copied into `dest` and
    readable by uid 65532 (the originals are root's, under the server's state directory); the
    copy names them relative to itself, as a kubeconfig may."""
    config = yaml.safe_load(source.read_text())
    for entry, fields in (
        ("clusters", ("certificate-authority",)),
        ("users", ("client-certificate", "client-key")),
    ):
        for item in config[entry]:
            body = item.get("cluster") or item.get("user")
            for name in fields:
                if name in body:
                    copy = dest / f"{item['name']}-{name}"
                    shutil.copyfile(body[name], copy)
                    copy.chmod(0o644)
                    body[name] = copy.name
    kubeconfig = dest / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    kubeconfig.chmod(0o644)
    return kubeconfig


async def test_controller_in_the_image_runs_as_65532_and_gives_a_node_its_eris(
    kit: Kit, image: str, kube_api, emu, k8s: AsyncClient, tmp_path: Path, container_name: str
) -> None:
    """The controller as its Deployment runs it: uid 65532, read-only root file system, only
    /tmp writable (its webhook certificates go there). Against the test API server and the
    emulated ECS region it takes its Lease and turns a new Node into a Ready ERdmaDevice."""
    assert "Run the Regular-mode controller" in docker_run(
        kit, image, "controller", "--help", options=("--user", "65532:65532")
    )
    work = tmp_path / "work"
    work.mkdir(mode=0o755)
    config = {
        **FAST,
        "ecsEndpoint": emu.endpoint,
        "ecsProtocol": "HTTP",
        "healthPort": free_port(),
        "controllerNamespace": "default",
        "leaseName": f"erdma-image-{uuid.uuid4().hex[:6]}",
        "certDir": "/tmp/certs",
    }
    credential = {
        "accessKeyID": DEFAULT_ACCESS_KEY_ID,
        "accessKeySecret": DEFAULT_ACCESS_KEY_SECRET,
    }
    for name, body in (("config.json", config), ("credential.json", credential)):
        (work / name).write_text(json.dumps(body))
        (work / name).chmod(0o644)
    readable_kubeconfig(kube_api.kubeconfig, work)
    started = kit.run(
        [
            "docker",
            "run",
            "-d",
            "--name",
            container_name,
            "--network=host",
            "--read-only",
            "--tmpfs",
            "/tmp",
            "--user",
            "65532:65532",
            "-v",
            f"{work}:/config:ro",
            image,
            "controller",
            "--config-path",
            "/config/config.json",
            "--credential-path",
            "/config/credential.json",
            "--kubeconfig",
            "/config/kubeconfig",
        ]
    )
    assert started.returncode == 0, started.stderr
    inst = emu.world.add_instance(GPU_TWO_CARDS.name, jumbo_frame=True)
    name = await add_node(k8s, inst)
    try:
        await eventually(lambda: ready_device(k8s, name), timeout=180)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; controller log:\n{logs(kit, container_name)}") from None
    stop_cleanly(kit, container_name)


def registry_get(url: str, accept: str = "application/json") -> dict | None:
    """A registry API answer as JSON, or None while it does not answer."""
    request = urllib.request.Request(url, headers={"Accept": accept})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return dict(json.load(answer))
    except (urllib.error.URLError, OSError, ValueError):
        return None


async def test_push_puts_the_image_under_the_charts_path_in_the_registry(
    kit: Kit, image: str, tmp_path: Path
) -> None:
    """`make push REGISTRY=...` against a real registry (Debian's docker-registry on loopback,
    which the engine trusts without TLS): the image lands as REGISTRY/erdma-k8s/erdma:<version>,
    the path of the chart's default, and the registry serves exactly this image."""
    server = shutil.which("docker-registry")
    if server is None:
        pytest.skip("docker-registry is not installed (Debian package docker-registry; .ci/run)")
    port = free_port()
    config = {
        "version": 0.1,
        "log": {"level": "warn"},
        "http": {"addr": f"127.0.0.1:{port}"},
        "storage": {"filesystem": {"rootdirectory": str(tmp_path / "data")}},
    }
    (tmp_path / "config.yml").write_text(yaml.safe_dump(config))
    base = f"http://127.0.0.1:{port}/v2"
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    target = f"127.0.0.1:{port}/erdma-k8s/erdma:{version}"
    with open(tmp_path / "registry.log", "wb") as log:
        registry = subprocess.Popen(
            [server, "serve", str(tmp_path / "config.yml")], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        await until(lambda: registry_get(f"{base}/") is not None, what="the registry answers")
        pushed = kit.run(
            [
                sys.executable,
                str(SCRIPT),
                "push",
                "--registry",
                f"127.0.0.1:{port}",
                "--image",
                image,
            ],
            timeout=600,
        )
        assert pushed.returncode == 0, f"{pushed.stdout}\n{pushed.stderr}"
        assert f"docker push {target}" in pushed.stdout
        tags = registry_get(f"{base}/erdma-k8s/erdma/tags/list")
        assert tags == {"name": "erdma-k8s/erdma", "tags": [version]}
        manifest = registry_get(
            f"{base}/erdma-k8s/erdma/manifests/{version}",
            "application/vnd.docker.distribution.manifest.v2+json",
        )
        assert manifest is not None and manifest["config"]["digest"] == image
    finally:
        registry.terminate()
        registry.wait(timeout=30)
        kit.run(["docker", "rmi", target])
