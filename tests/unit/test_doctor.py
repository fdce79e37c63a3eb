"""`erdma doctor`: one verdict and remedy per check, on every fixture host; char devices
missing, present without a driver, or usable."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from erdma.sim import fakehost
from tests.unit.doctor_support import (
    F,
    P,
    S,
    W,
    doctor,
    make_usable,
    needs_root,
    user_space,
    verdicts,
)

# --- every fixture variant ------------------------------------------------------------------
EXPECTED = {  # rdma-devices, ports, driver, provider
    "default": (P, P, P, P),
    "compat": (P, P, P, P),
    "port-down": (P, F, P, P),
    "no-numa": (P, P, P, P),
    "uverbs-swapped": (P, P, P, P),
    "no-rdma-cm": (P, P, P, P),
    "driver-not-loaded": (F, S, F, P),
    "mlx5": (P, P, P, P),
    "gpu": (P, P, P, P),
    "lingjun": (P, P, S, S),
}
EXPECTED_NODES = {  # char-devices, rdma-cm, with every node backed by a driver
    "default": (P, P),
    "compat": (P, P),
    "port-down": (P, P),
    "no-numa": (P, P),
    "uverbs-swapped": (P, P),
    "no-rdma-cm": (P, F),
    "driver-not-loaded": (S, S),
    "mlx5": (P, P),
    "gpu": (P, P),
    "lingjun": (P, S),
}


@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_each_fixture_variant_gets_its_verdicts(tmp_path: Path, variant: str):
    fakehost.build(tmp_path, variant)
    user_space(tmp_path)
    got = verdicts(tmp_path)
    names = ("rdma-devices", "ports", "driver", "provider")
    assert tuple(got[n] for n in names) == EXPECTED[variant]
    assert got["os-image"] is P and got["smc-r"] is P and got["nccl-env"] is S


@needs_root
@pytest.mark.parametrize("variant", sorted(EXPECTED_NODES))
def test_each_fixture_variant_with_working_nodes(tmp_path: Path, variant: str):
    fakehost.build(tmp_path, variant)
    make_usable(tmp_path)
    got = verdicts(tmp_path)
    assert (got["char-devices"], got["rdma-cm"]) == EXPECTED_NODES[variant]


def test_driver_mode_is_named(tmp_path: Path):
    fakehost.build(tmp_path / "d", "default")
    fakehost.build(tmp_path / "c", "compat")
    assert "mode default (compat_mode=N" in doctor(tmp_path / "d")["driver"][1]
    assert "mode compat (compat_mode=Y" in doctor(tmp_path / "c")["driver"][1]
    lingjun = fakehost.build(tmp_path / "l", "lingjun")
    assert doctor(lingjun.root)["driver"][1] == "no erdma driver; RDMA devices here use mlx5_core"


def test_upstream_driver_mode_comes_from_the_node_type(tmp_path: Path):
    spec = fakehost.variant("compat")
    fakehost.build(tmp_path, replace(spec, compat_mode=None))
    assert "mode compat (upstream driver" in doctor(tmp_path)["driver"][1]


def test_port_down_names_the_device_and_the_netdev_to_bring_up(tmp_path: Path):
    fakehost.build(tmp_path, "port-down")
    verdict, message = doctor(tmp_path)["ports"]
    assert verdict is F
    assert "erdma_0 port 1 DOWN (Disabled; netdev eth1)" in message


def test_no_rdma_cm_in_default_mode_fails_but_compat_mode_does_not_need_it(tmp_path: Path):
    fakehost.build(tmp_path / "d", "no-rdma-cm")
    verdict, message = doctor(tmp_path / "d")["rdma-cm"]
    assert verdict is F and "default mode needs rdma_cm, and this host has none" in message
    compat = replace(fakehost.variant("compat"), rdma_cm=False)
    fakehost.build(tmp_path / "c", compat)
    verdict, message = doctor(tmp_path / "c")["rdma-cm"]
    assert verdict is P and "compat mode does not need it" in message


# --- char devices: missing vs present-without-driver vs usable ------------------------------
@needs_root
def test_fixture_nodes_exist_but_no_driver_is_behind_them(tmp_path: Path):
    fakehost.build(tmp_path, "uverbs-swapped")
    got = doctor(tmp_path)
    verdict, message = got["char-devices"]
    assert verdict is F
    assert (
        "/dev/infiniband/uverbs1 (erdma_0) is present but no driver is behind it (ENXIO" in message
    )
    verdict, message = got["rdma-cm"]
    assert verdict is F
    assert "/dev/infiniband/rdma_cm is present but no driver is behind it (ENODEV" in message


def test_missing_nodes_are_reported_as_missing(tmp_path: Path):
    host = fakehost.build(tmp_path, "default")
    host.remove_node("/dev/infiniband/uverbs0")
    host.remove_node("/dev/infiniband/uverbs1")
    verdict, message = doctor(tmp_path)["char-devices"]
    assert verdict is F
    assert message == (
        "missing: /dev/infiniband/uverbs0 (erdma_0), /dev/infiniband/uverbs1 (erdma_1)"
    )


def test_a_regular_file_is_not_a_device_node(tmp_path: Path):
    host = fakehost.build(tmp_path, "default")
    host.remove_node("/dev/infiniband/uverbs0")
    (tmp_path / "dev/infiniband/uverbs0").write_text("")
    verdict, message = doctor(tmp_path)["char-devices"]
    assert verdict is F
    assert "/dev/infiniband/uverbs0 (erdma_0) is not a character device" in message


@needs_root
def test_usable_nodes_pass(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    make_usable(tmp_path)
    got = doctor(tmp_path)
    assert got["char-devices"] == (
        P,
        "open read-write: /dev/infiniband/uverbs0 (erdma_0), /dev/infiniband/uverbs1 (erdma_1)",
    )
    assert got["rdma-cm"][0] is P


@needs_root
def test_container_given_one_device_warns_about_the_others(tmp_path: Path):
    host = fakehost.build(tmp_path, "default")
    make_usable(tmp_path)
    host.remove_node("/dev/infiniband/uverbs1")
    verdict, message = doctor(tmp_path)["char-devices"]
    assert verdict is W
    assert "usable: /dev/infiniband/uverbs0 (erdma_0); not in this /dev: " in message


@needs_root
def test_stale_node_after_a_driver_reload_is_named(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    node = tmp_path / "dev/infiniband/uverbs0"
    node.unlink()
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(231, 200))
    verdict, message = doctor(tmp_path)["char-devices"]
    assert verdict is F
    assert "uverbs0 (erdma_0) is 231:200 but sysfs says 231:192: a stale node" in message
