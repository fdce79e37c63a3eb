"""A claim from creation to a running container, with every real part this machine has.

kube-testserver stores the DeviceClass, the ResourceClaim and this node's ResourceSlice (the
driver publishes it); the test plays kube-scheduler (tests/integration/dra_scheduler.py, which
documents the allocation it writes to the claim's status); the fake kubelet registers the
driver through plugins_registry and calls NodePrepareResources over the real DRA proto; and
containerd's CRI plugin (shared/tools/container-engines, `cri-run --cdi`) starts a container
with the CDI device ID the driver returned, which must see exactly the allocated uverbs node
(the device cgroup lets it through: `open` fails with ENXIO, not EPERM) and the device env.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice
from lightkube.types import PatchType

from erdma.agent.health import device_health
from erdma.dra import DraConfig, DraDriver, pcie_root
from erdma.dra.names import DRIVER_NAME, PCIE_ROOT_ATTRIBUTE
from erdma.host.devices import scan
from erdma.sim import fakehost
from erdma.sim.dra_kubelet import FakeDraKubelet
from tests.fakes.kubeapi import KubeApiServer
from tests.integration.dra_scheduler import allocate

pytest_plugins = ["tests.integration.conftest_kubeapi"]

ENGINES = Path(os.environ.get("ENGINE_STATE", "/var/tmp/container-engines"))
CONTAINERD = ENGINES / "containerd" / "containerd.sock"
CRI_RUN = ENGINES / "bin" / "cri-run"
IMAGE = "docker.io/local/busybox:e"
GPU_DRIVER = "gpu.example.com"
CLASSES = {
    DRIVER_NAME: {
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f'device.driver == "{DRIVER_NAME}" && '
                        f'device.attributes["{DRIVER_NAME}"].kind == "erdma"'
                    }
                }
            ]
        }
    },
    GPU_DRIVER: {
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU_DRIVER}"'}}]}
    },
}


def containerd_ready() -> str | None:
    """Why containerd CRI cannot be used here, or None when it can."""
    if not CRI_RUN.exists():
        return f"{CRI_RUN} missing: run shared/tools/container-engines/setup.sh"
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(CONTAINERD))
        except OSError as exc:
            return f"containerd CRI at {CONTAINERD} not reachable: {exc}"
    return None


@pytest.fixture
async def k8s(kube_api: KubeApiServer) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig), field_manager="test")
    for name, body in CLASSES.items():
        obj: Any = DeviceClass.from_dict({"metadata": {"name": name}, **body})
        await client.apply(obj, field_manager="test", force=True)
    yield client
    await client.close()


@pytest.fixture
async def node(k8s: AsyncClient) -> AsyncIterator[str]:
    name = f"dra-flow-{uuid.uuid4().hex[:6]}"
    await k8s.create(Node(metadata=ObjectMeta(name=name)))
    yield name
    await k8s.delete(Node, name)


@pytest.fixture
def cdi_dir(short_root: Path) -> Path:
    """containerd's CDI directory when the engines are set up, else a private one."""
    return ENGINES / "cdi" if containerd_ready() is None else short_root / "cdi"


async def run_container(cdi_id: str, script: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        str(CRI_RUN),
        IMAGE,
        "--cdi",
        cdi_id,
        "--",
        "sh",
        "-c",
        script,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PATH": f"{ENGINES / 'bin'}:{os.environ.get('PATH', '')}"},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode()


async def schedule(k8s: AsyncClient, name: str, node: str, pod: str) -> dict:
    """What kube-scheduler does for a pod using claim `name`: allocate and reserve."""
    claim = (await k8s.get(ResourceClaim, name, namespace="default")).to_dict()
    classes = {n: {"spec": c["spec"]} for n, c in CLASSES.items()}
    slices = [s.to_dict() async for s in k8s.list(ResourceSlice, fields={"spec.nodeName": node})]
    status = allocate(claim, classes, slices, node, (pod, str(uuid.uuid4())))
    patched = await k8s.patch(
        ResourceClaim.Status,
        name,
        {"status": status},
        namespace="default",
        patch_type=PatchType.MERGE,
    )
    return patched.to_dict()


async def create_claim(k8s: AsyncClient, name: str, devices: dict) -> str:
    obj: Any = ResourceClaim.from_dict(
        {"metadata": {"name": name, "namespace": "default"}, "spec": {"devices": devices}}
    )
    created = await k8s.create(obj)
    return created.metadata.uid


async def publish_gpus(k8s: AsyncClient, node: str, host: fakehost.FakeHost) -> None:
    """A GPU driver's slice, with pcieRoot computed by the same rule as ours."""
    gpus = [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "index": {"int": i},
                PCIE_ROOT_ATTRIBUTE: {"string": pcie_root(host.root, g.pci_address)},
            },
        }
        for i, g in enumerate(scan(host.root).gpus)
    ]
    body = {
        "metadata": {"name": f"{node}-{GPU_DRIVER}"},
        "spec": {
            "driver": GPU_DRIVER,
            "nodeName": node,
            "devices": gpus,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        },
    }
    gpu_slice: Any = ResourceSlice.from_dict(body)
    await k8s.create(gpu_slice)


async def test_gpu_and_nic_on_one_pcie_root_reach_the_container(short_root, k8s, node, cdi_dir):
    spec = replace(fakehost.erdma_node(), gpus=(("0000:00:08.0", 0), ("0000:80:08.0", 1)))
    host = fakehost.build(short_root / "host", spec)
    driver = DraDriver(
        DraConfig(enabled=True),
        node_name=node,
        host_root=host.root,
        kubelet_dir=short_root / "kubelet",
        cdi_dir=cdi_dir,
        client=k8s,
        health=device_health,
    )
    driver.publish(scan(host.root))
    await publish_gpus(k8s, node, host)
    claims = ["train"]
    try:
        async with FakeDraKubelet(short_root / "kubelet") as kubelet, driver:
            await driver.wait_published()
            await kubelet.wait_registered(DRIVER_NAME)
            gpu1 = {"cel": {"expression": f'device.attributes["{GPU_DRIVER}"].index == 1'}}
            requests = [
                {"name": "gpu", "exactly": {"deviceClassName": GPU_DRIVER, "selectors": [gpu1]}},
                {"name": "nic", "exactly": {"deviceClassName": DRIVER_NAME}},
            ]
            aligned = {"requests": ["gpu", "nic"], "matchAttribute": PCIE_ROOT_ATTRIBUTE}
            devices = {"requests": requests, "constraints": [aligned]}
            uid = await create_claim(k8s, "train", devices)
            status = (await schedule(k8s, "train", node, "pod-a"))["status"]
            results = {
                r["request"]: r["device"] for r in status["allocation"]["devices"]["results"]
            }
            assert results == {"gpu": "gpu-1", "nic": "erdma-1"}  # both on pci0000:80

            response = await kubelet.prepare(DRIVER_NAME, [("default", uid, "train")])
            prepared = response.claims[uid]
            assert prepared.error == ""
            (device,) = prepared.devices  # the GPU is the GPU driver's to prepare
            assert device.device_name == "erdma-1" and list(device.request_names) == ["nic"]
            (cdi_id,) = device.cdi_device_ids
            spec_path = Path(driver.prepared[uid].spec_file)
            assert spec_path.parent == cdi_dir and spec_path.exists()

            # a second pod shares the claim: the scheduler only adds it to reservedFor
            again = await kubelet.prepare(DRIVER_NAME, [("default", uid, "train")])
            assert again.claims[uid] == prepared

            why = containerd_ready()
            if why is None:
                _, out = await run_container(
                    cdi_id,
                    (
                        "ls /dev/infiniband; stat -c '%n %t:%T' /dev/infiniband/uverbs1; "
                        "echo ERDMA_DEVICES=$ERDMA_DEVICES; cat /dev/infiniband/uverbs1"
                    ),
                )
                assert "/dev/infiniband/uverbs1 e7:c1" in out, out  # 231:193, erdma_1's node
                assert "uverbs0" not in out, out
                assert "ERDMA_DEVICES=erdma_1" in out, out
                assert "No such device or address" in out, out  # cgroup allowed, no driver
                assert "rdma_cm" in out.splitlines(), out  # default mode: rdma_cm too

            await kubelet.unprepare(DRIVER_NAME, [("default", uid, "train")])
            assert not spec_path.exists() and driver.prepared == {}
            if why is not None:
                pytest.skip(f"claim prepared and cleaned; container not run: {why}")
    finally:
        for name in claims:
            await k8s.delete(ResourceClaim, name, namespace="default")
        await k8s.delete(ResourceSlice, f"{node}-{GPU_DRIVER}")
        shutil.rmtree(short_root / "kubelet", ignore_errors=True)
