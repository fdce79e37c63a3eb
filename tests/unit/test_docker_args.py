"""`erdma docker args` / `erdma docker run`: the flags a container needs for its eRDMA devices."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

from click.testing import CliRunner, Result

from erdma.sim import fakehost
from erdma.tools.docker import DockerExec, docker_group

MEMLOCK = ["--ulimit", "memlock=-1", "--cap-add=IPC_LOCK"]
UVERBS0 = "--device=/dev/infiniband/uverbs0"
UVERBS1 = "--device=/dev/infiniband/uverbs1"
RDMA_CM = "--device=/dev/infiniband/rdma_cm"


def _invoke(*args: str, obj: object = None) -> Result:
    return CliRunner().invoke(docker_group, list(args), obj=obj)


def _args(root: Path, *flags: str) -> list[str]:
    result = _invoke("args", "--root", str(root), *flags)
    assert result.exit_code == 0, result.output
    return shlex.split(result.stdout)


def test_two_devices_get_both_uverbs_rdma_cm_memlock_and_host_net(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    assert _args(tmp_path) == [UVERBS0, UVERBS1, RDMA_CM, *MEMLOCK, "--net=host"]


def test_one_device_host(tmp_path: Path):
    spec = replace(fakehost.erdma_node(), rdma=(fakehost.ERDMA0,))
    fakehost.build(tmp_path, spec)
    assert _args(tmp_path) == [UVERBS0, RDMA_CM, *MEMLOCK, "--net=host"]


def test_chosen_device_gets_only_its_own_uverbs(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    assert _args(tmp_path, "--device", "erdma_1") == [UVERBS1, RDMA_CM, *MEMLOCK, "--net=host"]


def test_uverbs_index_is_looked_up_not_guessed_from_the_name(tmp_path: Path):
    fakehost.build(tmp_path, "uverbs-swapped")
    assert _args(tmp_path, "--device", "erdma_0")[0] == UVERBS1
    assert _args(tmp_path, "--device", "erdma_1")[0] == UVERBS0
    # order follows the order asked for; a repeated name is passed once
    flags = _args(tmp_path, "--device", "erdma_1", "--device", "erdma_0", "--device", "erdma_1")
    assert flags[:3] == [UVERBS0, UVERBS1, RDMA_CM]


def test_no_rdma_cm_on_the_host_means_no_rdma_cm_flag(tmp_path: Path):
    fakehost.build(tmp_path, "no-rdma-cm")
    assert _args(tmp_path) == [UVERBS0, UVERBS1, *MEMLOCK, "--net=host"]


def test_no_host_net_leaves_out_net_host(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    assert "--net=host" not in _args(tmp_path, "--no-host-net")


def test_mad_devices_of_an_ib_hca_are_passed_too(tmp_path: Path):
    fakehost.build(tmp_path, "mlx5")
    flags = _args(tmp_path, "--device", "mlx5_0")
    assert flags[:4] == [
        UVERBS0,
        "--device=/dev/infiniband/umad0",
        "--device=/dev/infiniband/issm0",
        RDMA_CM,
    ]


def test_no_device_is_a_clear_error(tmp_path: Path):
    fakehost.build(tmp_path, "driver-not-loaded")
    result = _invoke("args", "--root", str(tmp_path))
    assert result.exit_code == 1
    assert f"no RDMA devices found under {tmp_path}" in result.output
    assert "erdma kernel module is not loaded" in result.output


def test_unknown_device_lists_the_devices_present(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    result = _invoke("args", "--root", str(tmp_path), "--device", "erdma_7")
    assert result.exit_code == 1
    assert "unknown --device 'erdma_7': devices present are erdma_0, erdma_1" in result.output


def test_missing_node_is_warned_about(tmp_path: Path):
    host = fakehost.build(tmp_path, "default")
    host.remove_node("/dev/infiniband/uverbs1")
    result = _invoke("args", "--root", str(tmp_path))
    assert result.exit_code == 0
    assert "warning: /dev/infiniband/uverbs1 is missing on this host" in result.stderr
    assert "warning" not in result.stdout


def test_run_dry_run_prints_the_exact_shell_quoted_argv(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    result = _invoke(
        "run", "--root", str(tmp_path), "--device", "erdma_0", "--dry-run",
        "--rm", "-e", "A=b c", "alinux3", "sh", "-c", "ibv_devinfo; echo done",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert shlex.split(result.stdout) == [
        "docker", "run", UVERBS0, RDMA_CM, *MEMLOCK, "--net=host",
        "--rm", "-e", "A=b c", "alinux3", "sh", "-c", "ibv_devinfo; echo done",
    ]  # fmt: skip
    assert "'A=b c'" in result.stdout


class RecordingExec:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, file: str, argv: list[str]) -> None:
        self.calls.append((file, argv))


def test_run_execs_docker_with_the_flags_and_leaves_later_options_to_docker(tmp_path: Path):
    fakehost.build(tmp_path, "uverbs-swapped")
    recorder = RecordingExec()
    result = _invoke(
        "run", "--root", str(tmp_path), "--device", "erdma_0", "--no-host-net",
        "img", "ls", "--device", "x",
        obj=DockerExec(exec=recorder),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert recorder.calls == [
        ("docker", ["docker", "run", UVERBS1, RDMA_CM, *MEMLOCK, "img", "ls", "--device", "x"])
    ]


def test_run_without_image_is_a_usage_error(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    result = _invoke("run", "--root", str(tmp_path))
    assert result.exit_code == 2
    assert "missing IMAGE" in result.output


def test_run_with_no_device_does_not_exec(tmp_path: Path):
    fakehost.build(tmp_path, "driver-not-loaded")
    recorder = RecordingExec()
    result = _invoke("run", "--root", str(tmp_path), "img", obj=DockerExec(exec=recorder))
    assert result.exit_code == 1
    assert recorder.calls == []


def test_run_with_a_docker_cli_that_does_not_exist_says_so(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    missing = tmp_path / "no-such-docker"
    result = _invoke("run", "--root", str(tmp_path), "--docker", str(missing), "img")
    assert result.exit_code == 1
    assert f"{str(missing)!r} not found in PATH" in result.output
