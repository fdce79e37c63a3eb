"""`make demo` (`erdma sim`) is read by people who know Kubernetes, not this project's test
fixtures: it talks about a simulated node, shows the node's allocatable as `kubectl describe
node` does and where the number comes from, says what a device ID such as `erdma_0/0` is,
marks what ran only against the simulated node, and says whether a missing optional module
matters."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _sim(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "erdma", "sim", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def default() -> str:
    return _sim()


@pytest.fixture(scope="module")
def gpu() -> str:
    return _sim("--variant", "gpu")


def test_it_speaks_of_a_simulated_node_not_a_fixture_host(default: str, gpu: str):
    for out in (default, gpu):
        assert "simulated node" in out and "fixture" not in out


def test_allocatable_is_shown_as_kubectl_describe_node_shows_it(default: str):
    assert "kubectl describe node" in default
    assert "Capacity:\n     aliyun/erdma:  400\n   Allocatable:\n     aliyun/erdma:  400" in default
    assert "400 = 2 devices (erdma_0, erdma_1) x 200 slots (slotsPerDevice)" in default


def test_a_port_going_down_lowers_allocatable_not_capacity(default: str):
    down = default.split("DOWN", 1)[1].split("==", 1)[0]
    assert "Capacity:\n     aliyun/erdma:  400\n   Allocatable:\n     aliyun/erdma:  200" in down


def test_the_device_id_is_explained(default: str):
    assert "erdma_0/0 is slot 0 of device erdma_0" in default


def test_commands_are_marked_as_run_on_the_simulated_node_only(gpu: str):
    ran = [line.strip() for line in gpu.splitlines() if line.strip().startswith("ran")]
    assert ran and all(line.startswith("ran on the simulated node only") for line in ran), ran
    assert any(line.endswith(": modinfo nvidia_peermem") for line in ran), ran


def test_the_missing_optional_module_says_whether_it_matters(gpu: str):
    [line] = [x for x in gpu.splitlines() if "nvidia_peermem is optional" in x]
    assert "GPUDirect RDMA" in line and "NCCL" in line
