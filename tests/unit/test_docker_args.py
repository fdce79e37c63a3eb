"""`erdma docker args` / `erdma docker run`: the flags a container needs for its RDMA devices.

These check the command line erdma builds, run as `erdma docker ...`;
tests/integration/test_engine_docker.py runs it through real Docker and Podman and looks inside
the container.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from erdma.cli import main
from erdma.host.model import CharDevice
from erdma.sim import fakehost
from erdma.tools.docker import (
    ENGINE_ERROR,
    DockerExec,
    Memlock,
    device_flag,
    parse_memlock,
)

MEMLOCK = ["--ulimit", "memlock=-1", "--cap-add=IPC_LOCK"]
#: the env a pod gets with erdma_0, erdma_1 or both (the fixture's PNETIDs)
ENV0 = ["--env=ERDMA_DEVICES=erdma_0", "--env=SMCR_PNET=00163E2F3775"]
ENV1 = ["--env=ERDMA_DEVICES=erdma_1", "--env=SMCR_PNET=00163E2F3111"]
ENV01 = ["--env=ERDMA_DEVICES=erdma_0,erdma_1", "--env=SMCR_PNET=00163E2F3775"]


def _invoke(*args: str, obj: object = None) -> Result:
    return CliRunner().invoke(main, ["docker", *args], obj=obj)


def _dev(root: Path, name: str) -> str:
    """The flag for /dev/infiniband/<name> of a fixture host: the node under the root."""
    return f"--device={root}/dev/infiniband/{name}:/dev/infiniband/{name}"


def _args(root: Path, *flags: str) -> list[str]:
    result = _invoke("args", "--root", str(root), *flags)
    assert result.exit_code == 0, result.output
    return shlex.split(result.stdout)


def test_two_devices_get_both_uverbs_rdma_cm_memlock_and_host_net(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    assert _args(tmp_path) == [
        _dev(tmp_path, "uverbs0"), _dev(tmp_path, "uverbs1"), _dev(tmp_path, "rdma_cm"),
        *ENV01, *MEMLOCK, "--net=host",
    ]  # fmt: skip


def test_on_the_real_root_the_flag_is_the_plain_path():
    node = CharDevice("/dev/infiniband/uverbs0", 231, 192, True)
    assert device_flag(node, "/") == "--device=/dev/infiniband/uverbs0"
    assert device_flag(node, "/host") == (
        "--device=/host/dev/infiniband/uverbs0:/dev/infiniband/uverbs0"
    )


def test_one_device_host(tmp_path: Path):
    spec = replace(fakehost.erdma_node(), rdma=(fakehost.ERDMA0,))
    fakehost.build(tmp_path, spec)
    assert _args(tmp_path)[:2] == [_dev(tmp_path, "uverbs0"), _dev(tmp_path, "rdma_cm")]


def test_chosen_device_gets_only_its_own_uverbs(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    assert _args(tmp_path, "--device", "erdma_1") == [
        _dev(tmp_path, "uverbs1"), _dev(tmp_path, "rdma_cm"), *ENV1, *MEMLOCK, "--net=host",
    ]  # fmt: skip


def test_uverbs_index_is_looked_up_not_guessed_from_the_name(tmp_path: Path):
    fakehost.build(tmp_path, "uverbs-swapped")
    assert _args(tmp_path, "--device", "erdma_0")[0] == _dev(tmp_path, "uverbs1")
    assert _args(tmp_path, "--device", "erdma_1")[0] == _dev(tmp_path, "uverbs0")
    # order follows the order asked for; a repeated name is passed once
    flags = _args(tmp_path, "--device", "erdma_1", "--device", "erdma_0", "--device", "erdma_1")
    assert flags[:3] == [
        _dev(tmp_path, "uverbs0"), _dev(tmp_path, "uverbs1"), _dev(tmp_path, "rdma_cm"),
    ]  # fmt: skip


def test_no_rdma_cm_on_the_host_means_no_rdma_cm_flag(tmp_path: Path):
    fakehost.build(tmp_path, "no-rdma-cm")
    assert _args(tmp_path) == [
        _dev(tmp_path, "uverbs0"), _dev(tmp_path, "uverbs1"), *ENV01, *MEMLOCK, "--net=host",
    ]  # fmt: skip


def test_no_host_net_leaves_out_net_host(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    assert "--net=host" not in _args(tmp_path, "--no-host-net")


# --- defaults: eRDMA first, other HCAs on Lingjun nodes, MAD nodes only when asked --------
def test_default_maps_only_the_erdma_devices_of_a_mixed_node(tmp_path: Path):
    fakehost.build(tmp_path, "mlx5")  # mlx5_0 on uverbs0, erdma_0/1 on uverbs1/2
    result = _invoke("args", "--root", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert shlex.split(result.stdout)[:3] == [
        _dev(tmp_path, "uverbs1"), _dev(tmp_path, "uverbs2"), _dev(tmp_path, "rdma_cm"),
    ]  # fmt: skip
    assert result.stderr == ""


def test_a_lingjun_node_without_erdma_maps_its_hcas_and_says_so(tmp_path: Path):
    fakehost.build(tmp_path, "lingjun")
    result = _invoke("args", "--root", str(tmp_path))
    assert result.exit_code == 0, result.output
    flags = shlex.split(result.stdout)
    assert flags[:5] == [*(_dev(tmp_path, f"uverbs{i}") for i in range(4)),
                         _dev(tmp_path, "rdma_cm")]  # fmt: skip
    assert not any("umad" in f or "issm" in f for f in flags)
    assert result.stderr.strip() == (
        "note: no eRDMA device on this host; mapping the other RDMA devices: "
        "mlx5_0, mlx5_1, mlx5_2, mlx5_3 (choose with --device)"
    )


def test_mad_nodes_of_an_ib_hca_only_with_mad(tmp_path: Path):
    fakehost.build(tmp_path, "mlx5")
    assert _args(tmp_path, "--device", "mlx5_0")[:2] == [
        _dev(tmp_path, "uverbs0"), _dev(tmp_path, "rdma_cm"),
    ]  # fmt: skip
    assert _args(tmp_path, "--device", "mlx5_0", "--mad")[:4] == [
        _dev(tmp_path, "uverbs0"), _dev(tmp_path, "umad0"), _dev(tmp_path, "issm0"),
        _dev(tmp_path, "rdma_cm"),
    ]  # fmt: skip


def test_mad_skips_devices_without_mad_nodes_with_a_note(tmp_path: Path):
    fakehost.build(tmp_path, "mlx5")
    result = _invoke("args", "--root", str(tmp_path), "--mad", "--device", "erdma_0",
                     "--device", "mlx5_0")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert _dev(tmp_path, "umad0") in shlex.split(result.stdout)
    assert "note: erdma_0 has no umad/issm nodes; --mad skips it" in result.stderr


# --- bad input: one line, naming the value and what is accepted ---------------------------
def _error(result: Result, code: int = 1) -> str:
    """The one line an error prints: `erdma docker args|run: error: ...`, with its code (1 for
    what the host lacks, 2 for a flag value, 125 for everything `run` refuses)."""
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and re.match(r"erdma docker (args|run): error: ", lines[0]), lines
    return lines[0]


def test_no_device_is_a_clear_error(tmp_path: Path):
    fakehost.build(tmp_path, "driver-not-loaded")
    line = _error(_invoke("args", "--root", str(tmp_path)))
    assert f"no RDMA devices found under {tmp_path}" in line
    assert "erdma kernel module is not loaded" in line


def test_unknown_device_lists_the_devices_present(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    line = _error(_invoke("args", "--root", str(tmp_path), "--device", "erdma_7"), 2)
    assert "unknown --device 'erdma_7': devices present are erdma_0, erdma_1" in line


def test_a_missing_uverbs_node_is_an_error_naming_device_node_and_the_good_ones(tmp_path: Path):
    host = fakehost.build(tmp_path, "default")
    host.remove_node("/dev/infiniband/uverbs1")
    line = _error(_invoke("args", "--root", str(tmp_path)))
    assert (
        f"device erdma_1: its uverbs node /dev/infiniband/uverbs1 (231:193) is missing under "
        f"{tmp_path}" in line
    )
    assert line.endswith("devices with their node: erdma_0")
    # the device whose node is there still works on its own
    assert _args(tmp_path, "--device", "erdma_0")[0] == _dev(tmp_path, "uverbs0")


def test_a_missing_rdma_cm_node_is_left_out_with_a_warning(tmp_path: Path):
    host = fakehost.build(tmp_path, "default")
    host.remove_node("/dev/infiniband/rdma_cm")
    result = _invoke("args", "--root", str(tmp_path))
    assert result.exit_code == 0
    assert not any(f.endswith(":/dev/infiniband/rdma_cm") for f in shlex.split(result.stdout))
    assert "warning: /dev/infiniband/rdma_cm is missing under" in result.stderr


def test_mad_on_an_erdma_only_selection_is_an_error(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    line = _error(_invoke("args", "--root", str(tmp_path), "--mad"))
    assert "--mad: none of erdma_0, erdma_1 has umad/issm nodes" in line


def test_a_missing_mad_node_is_an_error(tmp_path: Path):
    host = fakehost.build(tmp_path, "mlx5")
    host.remove_node("/dev/infiniband/issm0")
    line = _error(_invoke("args", "--root", str(tmp_path), "--device", "mlx5_0", "--mad"))
    assert "--mad: /dev/infiniband/issm0 missing under" in line


# --- memlock ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "flag"),
    [("unlimited", "memlock=-1"), ("-1", "memlock=-1"), ("8388608", "memlock=8388608:8388608"),
     ("64M", "memlock=67108864:67108864"), ("8m:1G", "memlock=8388608:1073741824"),
     ("512k", "memlock=524288:524288")],
)  # fmt: skip
def test_memlock_values(text: str, flag: str):
    assert parse_memlock(text).ulimit == flag


def test_a_finite_memlock_replaces_the_unlimited_one(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    flags = _args(tmp_path, "--memlock", "8388608")
    assert flags[3:] == [
        *ENV01, "--ulimit", "memlock=8388608:8388608", "--cap-add=IPC_LOCK", "--net=host",
    ]  # fmt: skip
    assert Memlock().ulimit == "memlock=-1"


@pytest.mark.parametrize(
    ("value", "why"),
    [("lots", "accepted values are 'unlimited' (or -1), a byte count (8388608, 64M, 1G) or "
               "SOFT:HARD (8388608:8388608)"),
     ("-2", "accepted values are"), ("8T", "accepted values are"), ("1:", "accepted values are"),
     ("2G:1G", "the soft limit 2147483648 is above the hard limit 1073741824")],
)  # fmt: skip
def test_a_bad_memlock_is_one_line_naming_the_value(tmp_path: Path, value: str, why: str):
    fakehost.build(tmp_path, "default")
    line = _error(_invoke("args", "--root", str(tmp_path), "--memlock", value), 2)
    assert f"invalid --memlock {value!r}: {why}" in line
    run = _invoke("run", "--root", str(tmp_path), "--memlock", value, "--dry-run", "img")
    assert f"invalid --memlock {value!r}" in _error(run, ENGINE_ERROR)


# --- erdma docker run --------------------------------------------------------------------
class RecordingExec:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, file: str, argv: list[str]) -> None:
        self.calls.append((file, argv))


def _which(*present: str):
    return lambda name: f"/usr/bin/{name}" if name in present else None


def test_run_dry_run_prints_the_exact_shell_quoted_argv(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    result = _invoke(
        "run", "--root", str(tmp_path), "--device", "erdma_0", "--dry-run",
        "--rm", "-e", "A=b c", "alinux3", "sh", "-c", "ibv_devinfo; echo done",
        obj=DockerExec(which=_which("docker", "podman")),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert shlex.split(result.stdout) == [
        "docker", "run", _dev(tmp_path, "uverbs0"), _dev(tmp_path, "rdma_cm"), *ENV0, *MEMLOCK,
        "--net=host", "--rm", "-e", "A=b c", "alinux3", "sh", "-c", "ibv_devinfo; echo done",
    ]  # fmt: skip
    assert "'A=b c'" in result.stdout


def test_run_execs_docker_with_the_flags_and_leaves_later_options_to_docker(tmp_path: Path):
    fakehost.build(tmp_path, "uverbs-swapped")
    recorder = RecordingExec()
    result = _invoke(
        "run", "--root", str(tmp_path), "--device", "erdma_0", "--no-host-net",
        "img", "ls", "--device", "x",
        obj=DockerExec(exec=recorder, which=_which("docker")),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    uverbs1, cm = _dev(tmp_path, "uverbs1"), _dev(tmp_path, "rdma_cm")
    assert recorder.calls == [
        ("docker", ["docker", "run", uverbs1, cm, *ENV0, *MEMLOCK, "img", "ls", "--device", "x"])
    ]


def test_double_dash_hands_an_engine_option_erdma_also_has_to_the_engine(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    recorder = RecordingExec()
    result = _invoke(
        "run", "--root", str(tmp_path), "--device", "erdma_0", "--",
        "--device", "/dev/null:/dev/mynull", "img", "true",
        obj=DockerExec(exec=recorder, which=_which("docker")),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    argv = recorder.calls[0][1]
    assert argv[-4:] == ["--device", "/dev/null:/dev/mynull", "img", "true"]
    assert _dev(tmp_path, "uverbs1") not in argv


def test_engine_default_is_docker_then_podman_and_can_be_chosen(tmp_path: Path):
    fakehost.build(tmp_path, "default")

    both = _which("docker", "podman")

    def argv0(*flags: str, which=both) -> str:
        recorder = RecordingExec()
        result = _invoke("run", "--root", str(tmp_path), *flags, "img",
                         obj=DockerExec(exec=recorder, which=which))  # fmt: skip
        assert result.exit_code == 0, result.output
        return recorder.calls[0][1][0]

    assert argv0() == "docker"
    assert argv0(which=_which("podman")) == "podman"
    assert argv0("--engine", "podman") == "podman"
    assert argv0("--engine", "podman", "--engine-cli", "/opt/bin/podman-cdi") == (
        "/opt/bin/podman-cdi"
    )
    assert argv0("--engine-cli", "podman-cdi", which=_which()) == "podman-cdi"
    assert argv0("--docker", "/opt/docker", which=_which()) == "/opt/docker"  # the old flag


def test_dry_run_without_an_engine_on_path_prints_the_docker_command(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    result = _invoke("run", "--root", str(tmp_path), "--dry-run", "img",
                     obj=DockerExec(which=_which()))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("docker run --device=")
    podman = _invoke("run", "--root", str(tmp_path), "--dry-run", "img",
                     obj=DockerExec(which=_which("podman")))  # fmt: skip
    assert podman.stdout.startswith("podman run --device=")


def test_unknown_engine_is_one_line_listing_the_engines(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    line = _error(_invoke("run", "--root", str(tmp_path), "--engine", "rkt", "img"), ENGINE_ERROR)
    assert (
        line
        == "erdma docker run: error: invalid --engine 'rkt': accepted values are docker, podman"
    )


def test_no_engine_on_path_says_what_was_looked_for(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    result = _invoke("run", "--root", str(tmp_path), "img", obj=DockerExec(which=_which()))
    line = _error(result, ENGINE_ERROR)
    assert "no container engine found on PATH (looked for docker, podman)" in line


def test_run_without_image_fails_like_docker_run(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    result = _invoke("run", "--root", str(tmp_path), obj=DockerExec(which=_which("docker")))
    assert "missing IMAGE" in _error(result, ENGINE_ERROR)


def test_run_with_no_device_does_not_exec(tmp_path: Path):
    fakehost.build(tmp_path, "driver-not-loaded")
    recorder = RecordingExec()
    result = _invoke("run", "--root", str(tmp_path), "img",
                     obj=DockerExec(exec=recorder, which=_which("docker")))  # fmt: skip
    assert "no RDMA devices found" in _error(result, ENGINE_ERROR)
    assert recorder.calls == []


def test_a_bad_erdma_flag_value_exits_125_too(tmp_path: Path):
    result = _invoke("run", "--root")
    assert result.exit_code == ENGINE_ERROR


def test_run_with_an_engine_cli_that_does_not_exist_says_so(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    missing = tmp_path / "no-such-docker"
    result = _invoke("run", "--root", str(tmp_path), "--engine-cli", str(missing), "img")
    line = _error(result, ENGINE_ERROR)
    assert f"--engine-cli {str(missing)!r} not found in PATH; install docker" in line
