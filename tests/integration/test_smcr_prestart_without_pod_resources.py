"""With prestartContainer on, a missing pod-resources socket must not fail
PreStartContainer for `aliyun/erdma` pods that do not ask for SMC-R.

PreStartContainer carries only device IDs. Without pod-resources the agent finds the pod in
kubelet's device checkpoint (pod UID by device ID) and its annotations in the CRI; with
neither, a pod can only be an SMC-R pod if some sandbox on the node asks for SMC-R.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from erdma.agent.smcr import PodNetnsSteps, SmcrConfigurator
from erdma.api.names import POD_RESOURCES_SOCKET, SMCR_ANNOTATION
from erdma.api.smcr import SmcrError
from erdma.host.smc import PnetBackend
from erdma.host.sysctl import Sysctls
from tests.fakes.cri import FakeCri, FakeSandbox

DEVICES = ["erdma_0-7"]


def _no_pnet(netns: str | None) -> PnetBackend:
    raise AssertionError("no pnet table may be touched here")


def _box(box_id: str, name: str, smcr: bool) -> FakeSandbox:
    annotations = {SMCR_ANNOTATION: "true"} if smcr else {}
    return FakeSandbox(box_id, "team", name, netns_path=None, annotations=annotations)


def _checkpoint(root: Path, uid: str, device_ids: list[str]) -> Path:
    """kubelet's device-plugins checkpoint (v2: DeviceIDs by NUMA node)."""
    path = root / "device-plugins/kubelet_internal_checkpoint"
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {
        "PodUID": uid,
        "ContainerName": "main",
        "ResourceName": "aliyun/erdma",
        "DeviceIDs": {"0": device_ids},
        "AllocResp": "",
    }
    path.write_text(json.dumps({"Data": {"PodDeviceEntries": [entry]}, "Checksum": 1}))
    return path


def _configurator(root: Path, cri: FakeCri, checkpoint: Path | None) -> SmcrConfigurator:
    steps = PodNetnsSteps(Sysctls(), pnet_for=_no_pnet)
    return SmcrConfigurator(
        steps,
        pod_resources_socket=root / POD_RESOURCES_SOCKET,
        runtime_socket=str(cri.socket_path),
        checkpoint=checkpoint,
    )


def _pnetid(device_id: str) -> str | None:
    return "00163E2F3775"


async def test_plain_pod_starts_at_once_without_pod_resources(
    kubelet_root: Path, caplog: pytest.LogCaptureFixture
):
    """No pod-resources socket: no gRPC connect is tried (it would wait for its timeout); the
    missing socket is noticed by its absence and the pod starts without SMC-R."""
    caplog.set_level(logging.WARNING, logger="erdma.agent.smcr")
    async with FakeCri(kubelet_root / "containerd.sock", [_box("sb1", "web-0", False)]) as cri:
        configurator = _configurator(kubelet_root, cri, kubelet_root / "no-checkpoint")
        said = await configurator.configure(DEVICES, _pnetid)
        assert "SMC-R not requested" in said
    assert "does not exist" in caplog.text and "List" not in caplog.text


async def test_checkpoint_tells_the_plain_pod_beside_an_smcr_pod(kubelet_root: Path):
    boxes = [_box("sb1", "web-0", False), _box("sb2", "trainer-0", True)]
    async with FakeCri(kubelet_root / "containerd.sock", boxes) as cri:
        configurator = _configurator(
            kubelet_root, cri, _checkpoint(kubelet_root, "uid-sb1", DEVICES)
        )
        said = await configurator.configure(DEVICES, _pnetid)
        assert "team/web-0: SMC-R not requested" in said


async def test_checkpoint_finds_the_smcr_pod(kubelet_root: Path):
    boxes = [_box("sb1", "web-0", False), _box("sb2", "trainer-0", True)]
    async with FakeCri(kubelet_root / "containerd.sock", boxes) as cri:
        configurator = _configurator(
            kubelet_root, cri, _checkpoint(kubelet_root, "uid-sb2", DEVICES)
        )
        # found and asked for: it goes on to configure (this fake sandbox has no netns path)
        with pytest.raises(SmcrError, match="team/trainer-0: the runtime reports no network"):
            await configurator.configure(DEVICES, _pnetid)


async def test_unknown_owner_beside_an_smcr_pod_fails_loudly(kubelet_root: Path):
    boxes = [_box("sb1", "web-0", False), _box("sb2", "trainer-0", True)]
    async with FakeCri(kubelet_root / "containerd.sock", boxes) as cri:
        configurator = _configurator(kubelet_root, cri, kubelet_root / "no-checkpoint")
        with pytest.raises(SmcrError, match=r"pod-resources.*team/trainer-0"):
            await configurator.configure(DEVICES, _pnetid)
