"""A container gets the same environment whichever way it got its eRDMA devices: from the
`aliyun/erdma` device plugin in a pod, from `erdma docker args`, or from the CDI spec of
`erdma cdi generate` (`ERDMA_DEVICES`, and `SMCR_PNET`, which `erdma smcr-init` reads)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from erdma import cdi
from erdma.agent.erdma import ErdmaPlugin, ErdmaPolicy
from erdma.cli import main
from erdma.host.devices import scan
from erdma.sim import fakehost


def _pod_env(root: Path, devices: list[str]) -> dict[str, str]:
    plugin = ErdmaPlugin(ErdmaPolicy())
    plugin.update(scan(root))
    (allocation,) = plugin.allocate([[f"{name}/0" for name in devices]])
    return dict(allocation.envs)


def _docker_env(root: Path, devices: list[str]) -> dict[str, str]:
    args = ["docker", "args", "--root", str(root)]
    for name in devices:
        args += ["--device", name]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    flags = shlex.split(result.stdout)
    return dict(f.removeprefix("--env=").split("=", 1) for f in flags if f.startswith("--env="))


def _cdi_env(root: Path, name: str) -> dict[str, str]:
    spec = cdi.build_spec(scan(root))
    [device] = [d for d in spec["devices"] if d["name"] == name]
    return dict(e.split("=", 1) for e in device["containerEdits"].get("env", []))


@pytest.mark.parametrize("devices", [["erdma_0"], ["erdma_1"], ["erdma_0", "erdma_1"]])
def test_docker_args_give_the_pod_env(tmp_path: Path, devices: list[str]):
    root = fakehost.build(tmp_path).root
    pod = _pod_env(root, devices)
    assert set(pod) == {"ERDMA_DEVICES", "SMCR_PNET"}
    assert _docker_env(root, devices) == pod


@pytest.mark.parametrize("device", ["erdma_0", "erdma_1"])
def test_each_cdi_device_gives_the_pod_env(tmp_path: Path, device: str):
    root = fakehost.build(tmp_path).root
    assert _cdi_env(root, device) == _pod_env(root, [device])


def test_the_cdi_device_all_gives_the_env_of_a_pod_with_every_device(tmp_path: Path):
    root = fakehost.build(tmp_path).root
    assert _cdi_env(root, "all") == _pod_env(root, ["erdma_0", "erdma_1"])
