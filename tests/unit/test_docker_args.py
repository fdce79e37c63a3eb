"""`erdma docker args` / `erdma docker run`: the flags a container needs for its RDMA devices.

These check the command line erdma builds, run as `erdma docker ...`;
tests/integration/test_engine_docker.py runs it through real Docker and Podman and looks inside
the container.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from erdma.host.model import CharDevice
from erdma.sim import fakehost
from erdma.tools.docker import (
    ENGINE_ERROR,
    Memlock,
    device_flag,
    parse_memlock,
)
from tests.unit.docker_cli_support import (
    ENV01,
    ENV1,
    MEMLOCK,
    device_flag_of,
    docker_args,
    error_line,
    invoke_docker,
)


def test_two_devices_get_both_uverbs_rdma_cm_memlock_and_host_net(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    assert docker_args(tmp_path) == [
        device_flag_of(tmp_path, "uverbs0"),
        device_flag_of(tmp_path, "uverbs1"),
        device_flag_of(tmp_path, "rdma_cm"),
        *ENV01,
        *MEMLOCK,
        "--net=host",
    ]


def test_on_the_real_root_the_flag_is_the_plain_path():
    node = CharDevice("/dev/infiniband/uverbs0", 231, 192, True)
    assert device_flag(node, "/") == "--device=/dev/infiniband/uverbs0"
    assert device_flag(node, "/host") == (
        "--device=/host/dev/infiniband/uverbs0:/dev/infiniband/uverbs0"
    )


def test_one_device_host(tmp_path: Path):
    spec = replace(fakehost.erdma_node(), rdma=(fakehost.ERDMA0,))
    fakehost.build(tmp_path, spec)
    assert docker_args(tmp_path)[:2] == [
        device_flag_of(tmp_path, "uverbs0"),
        device_flag_of(tmp_path, "rdma_cm"),
    ]


def test_chosen_device_gets_only_its_own_uverbs(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    assert docker_args(tmp_path, "--device", "erdma_1") == [
        device_flag_of(tmp_path, "uverbs1"),
        device_flag_of(tmp_path, "rdma_cm"),
        *ENV1,
        *MEMLOCK,
        "--net=host",
    ]


def test_uverbs_index_is_looked_up_not_guessed_from_the_name(tmp_path: Path):
    fakehost.build(tmp_path, "uverbs-swapped")
    assert docker_args(tmp_path, "--device", "erdma_0")[0] == device_flag_of(tmp_path, "uverbs1")
    assert docker_args(tmp_path, "--device", "erdma_1")[0] == device_flag_of(tmp_path, "uverbs0")
    # order follows the order asked for; a repeated name is passed once
    flags = docker_args(
        tmp_path, "--device", "erdma_1", "--device", "erdma_0", "--device", "erdma_1"
    )
    assert flags[:3] == [
        device_flag_of(tmp_path, "uverbs0"),
        device_flag_of(tmp_path, "uverbs1"),
        device_flag_of(tmp_path, "rdma_cm"),
    ]


def test_no_rdma_cm_on_the_host_means_no_rdma_cm_flag(tmp_path: Path):
    fakehost.build(tmp_path, "no-rdma-cm")
    assert docker_args(tmp_path) == [
        device_flag_of(tmp_path, "uverbs0"),
        device_flag_of(tmp_path, "uverbs1"),
        *ENV01,
        *MEMLOCK,
        "--net=host",
    ]


def test_no_host_net_leaves_out_net_host(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    assert "--net=host" not in docker_args(tmp_path, "--no-host-net")


# --- defaults: eRDMA first, other HCAs on Lingjun nodes, MAD nodes only when asked --------
def test_default_maps_only_the_erdma_devices_of_a_mixed_node(tmp_path: Path):
    fakehost.build(tmp_path, "mlx5")  # mlx5_0 on uverbs0, erdma_0/1 on uverbs1/2
    result = invoke_docker("args", "--root", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert shlex.split(result.stdout)[:3] == [
        device_flag_of(tmp_path, "uverbs1"),
        device_flag_of(tmp_path, "uverbs2"),
        device_flag_of(tmp_path, "rdma_cm"),
    ]
    assert result.stderr == ""


def test_a_lingjun_node_without_erdma_maps_its_hcas_and_says_so(tmp_path: Path):
    fakehost.build(tmp_path, "lingjun")
    result = invoke_docker("args", "--root", str(tmp_path))
    assert result.exit_code == 0, result.output
    flags = shlex.split(result.stdout)
    assert flags[:5] == [
        *(device_flag_of(tmp_path, f"uverbs{i}") for i in range(4)),
        device_flag_of(tmp_path, "rdma_cm"),
    ]
    assert not any("umad" in f or "issm" in f for f in flags)
    assert result.stderr.strip() == (
        "note: no eRDMA device on this host; mapping the other RDMA devices: "
        "mlx5_0, mlx5_1, mlx5_2, mlx5_3 (choose with --device)"
    )


def test_mad_nodes_of_an_ib_hca_only_with_mad(tmp_path: Path):
    fakehost.build(tmp_path, "mlx5")
    assert docker_args(tmp_path, "--device", "mlx5_0")[:2] == [
        device_flag_of(tmp_path, "uverbs0"),
        device_flag_of(tmp_path, "rdma_cm"),
    ]
    assert docker_args(tmp_path, "--device", "mlx5_0", "--mad")[:4] == [
        device_flag_of(tmp_path, "uverbs0"),
        device_flag_of(tmp_path, "umad0"),
        device_flag_of(tmp_path, "issm0"),
        device_flag_of(tmp_path, "rdma_cm"),
    ]


def test_mad_skips_devices_without_mad_nodes_with_a_note(tmp_path: Path):
    fakehost.build(tmp_path, "mlx5")
    result = invoke_docker(
        "args", "--root", str(tmp_path), "--mad", "--device", "erdma_0", "--device", "mlx5_0"
    )
    assert result.exit_code == 0, result.output
    assert device_flag_of(tmp_path, "umad0") in shlex.split(result.stdout)
    assert "note: erdma_0 has no umad/issm nodes; --mad skips it" in result.stderr


# --- bad input: one line, naming the value and what is accepted ---------------------------
def test_no_device_is_a_clear_error(tmp_path: Path):
    fakehost.build(tmp_path, "driver-not-loaded")
    line = error_line(invoke_docker("args", "--root", str(tmp_path)))
    assert f"no RDMA devices found under {tmp_path}" in line
    assert "erdma kernel module is not loaded" in line


def test_unknown_device_lists_the_devices_present(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    line = error_line(invoke_docker("args", "--root", str(tmp_path), "--device", "erdma_7"), 2)
    assert "unknown --device 'erdma_7': devices present are erdma_0, erdma_1" in line


def test_a_missing_uverbs_node_is_an_error_naming_device_node_and_the_good_ones(tmp_path: Path):
    host = fakehost.build(tmp_path, "default")
    host.remove_node("/dev/infiniband/uverbs1")
    line = error_line(invoke_docker("args", "--root", str(tmp_path)))
    assert (
        f"device erdma_1: its uverbs node /dev/infiniband/uverbs1 (231:193) is missing under "
        f"{tmp_path}" in line
    )
    assert line.endswith("devices with their node: erdma_0")
    # the device whose node is there still works on its own
    assert docker_args(tmp_path, "--device", "erdma_0")[0] == device_flag_of(tmp_path, "uverbs0")


def test_a_missing_rdma_cm_node_is_left_out_with_a_warning(tmp_path: Path):
    host = fakehost.build(tmp_path, "default")
    host.remove_node("/dev/infiniband/rdma_cm")
    result = invoke_docker("args", "--root", str(tmp_path))
    assert result.exit_code == 0
    assert not any(f.endswith(":/dev/infiniband/rdma_cm") for f in shlex.split(result.stdout))
    assert "warning: /dev/infiniband/rdma_cm is missing under" in result.stderr


def test_mad_on_an_erdma_only_selection_is_an_error(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    line = error_line(invoke_docker("args", "--root", str(tmp_path), "--mad"))
    assert "--mad: none of erdma_0, erdma_1 has umad/issm nodes" in line


def test_a_missing_mad_node_is_an_error(tmp_path: Path):
    host = fakehost.build(tmp_path, "mlx5")
    host.remove_node("/dev/infiniband/issm0")
    line = error_line(invoke_docker("args", "--root", str(tmp_path), "--device", "mlx5_0", "--mad"))
    assert "--mad: /dev/infiniband/issm0 missing under" in line


# --- memlock ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "flag"),
    [
        ("unlimited", "memlock=-1"),
        ("-1", "memlock=-1"),
        ("8388608", "memlock=8388608:8388608"),
        ("64M", "memlock=67108864:67108864"),
        ("8m:1G", "memlock=8388608:1073741824"),
        ("512k", "memlock=524288:524288"),
    ],
)
def test_memlock_values(text: str, flag: str):
    assert parse_memlock(text).ulimit == flag


def test_a_finite_memlock_replaces_the_unlimited_one(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    flags = docker_args(tmp_path, "--memlock", "8388608")
    assert flags[3:] == [
        *ENV01,
        "--ulimit",
        "memlock=8388608:8388608",
        "--cap-add=IPC_LOCK",
        "--net=host",
    ]
    assert Memlock().ulimit == "memlock=-1"


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (
            "lots",
            "accepted values are 'unlimited' (or -1), a byte count (8388608, 64M, 1G) or "
            "SOFT:HARD (8388608:8388608)",
        ),
        ("-2", "accepted values are"),
        ("8T", "accepted values are"),
        ("1:", "accepted values are"),
        ("2G:1G", "the soft limit 2147483648 is above the hard limit 1073741824"),
    ],
)
def test_a_bad_memlock_is_one_line_naming_the_value(tmp_path: Path, value: str, why: str):
    fakehost.build(tmp_path, "default")
    line = error_line(invoke_docker("args", "--root", str(tmp_path), "--memlock", value), 2)
    assert f"invalid --memlock {value!r}: {why}" in line
    run = invoke_docker("run", "--root", str(tmp_path), "--memlock", value, "--dry-run", "img")
    assert f"invalid --memlock {value!r}" in error_line(run, ENGINE_ERROR)
