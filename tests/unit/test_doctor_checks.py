"""`erdma doctor`: memlock, provider, OS image, SMC-R and NCCL checks, and the command itself
(exit codes, JSON, a crashing check, this machine)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from erdma.sim import fakehost
from erdma.tools.doctor import doctor_command, run_checks
from erdma.tools.doctor.model import REGISTRY, DoctorContext, check
from tests.unit.doctor_support import (
    ALINUX3,
    MIB,
    UNLIMITED,
    F,
    P,
    S,
    W,
    doctor,
    make_usable,
    needs_root,
    user_space,
    write,
)


# --- memlock, provider, OS image, SMC-R -----------------------------------------------------
@pytest.mark.parametrize(
    ("limit", "cap_eff", "verdict", "text"),
    [
        (UNLIMITED, None, P, "RLIMIT_MEMLOCK is unlimited"),
        ((8 * MIB, 8 * MIB), None, F, "RLIMIT_MEMLOCK is 8 MiB, below 64 MiB"),
        # docker's default capability set, without and with --cap-add=IPC_LOCK
        ((64 * 1024, 64 * 1024), "00000000a80425fb", F, "RLIMIT_MEMLOCK is 64 KiB"),
        ((8 * MIB, 8 * MIB), "00000000a80465fb", P, "but CAP_IPC_LOCK lifts the limit"),
        ((128 * MIB, 128 * MIB), None, P, "RLIMIT_MEMLOCK is 128 MiB (>= 64 MiB"),
    ],
)
def test_memlock(tmp_path: Path, limit, cap_eff, verdict, text):
    fakehost.build(tmp_path, "default")
    if cap_eff is not None:
        write(tmp_path, "proc/self/status", f"Name:\terdma\nCapEff:\t{cap_eff}\n")
    got = doctor(tmp_path, memlock=lambda: limit)["memlock"]
    assert got[0] is verdict and text in got[1]


def test_provider(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    verdict, message = doctor(tmp_path)["provider"]
    assert verdict is F and "no liberdma-rdmav*.so" in message
    write(tmp_path, "usr/lib/x86_64-linux-gnu/libibverbs/liberdma-rdmav34.so", "")
    verdict, message = doctor(tmp_path)["provider"]
    assert verdict is W and "/etc/libibverbs.d/erdma.driver is missing" in message
    write(tmp_path, "etc/libibverbs.d/erdma.driver", "driver erdma\n")
    assert doctor(tmp_path)["provider"] == (
        P,
        "/usr/lib/x86_64-linux-gnu/libibverbs/liberdma-rdmav34.so and "
        "/etc/libibverbs.d/erdma.driver",
    )


@pytest.mark.parametrize(
    ("os_release", "machine", "verdict", "text"),
    [
        (ALINUX3, "aarch64", P, "Alibaba Cloud Linux 3 (OpenAnolis Edition) (aarch64) is a sup"),
        ('ID=alinux\nVERSION_ID="2.1903"\n', "x86_64", P, "alinux 2.1903 (x86_64) is a supp"),
        (
            'ID=alinux\nVERSION_ID="2.1903"\n',
            "aarch64",
            W,
            "Alibaba Cloud Linux 2 is supported on x86_64 only, not aarch64",
        ),
        ("ID=ubuntu\nVERSION_ID=22.04\n", "x86_64", P, "is a supported eRDMA image"),
        ('ID="centos"\nVERSION_ID="7"\n', "x86_64", P, "is a supported eRDMA image"),
        (
            'ID="anolis"\nVERSION_ID="8.8"\nPRETTY_NAME="Anolis OS 8.8"\n',
            "x86_64",
            F,
            "Anolis OS 8.8: Anolis OS images are not supported",
        ),
        ('ID=debian\nVERSION_ID="12"\n', "x86_64", W, "debian 12 is not in the eRDMA-supported"),
        (None, "x86_64", W, "etc/os-release: OS image unknown"),
    ],
)
def test_os_image(tmp_path: Path, os_release, machine, verdict, text):
    fakehost.build(tmp_path, "default")
    if os_release is not None:
        write(tmp_path, "etc/os-release", os_release)
    got = doctor(tmp_path, machine=machine)["os-image"]
    assert got[0] is verdict and text in got[1]


def test_smc_r(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    verdict, message = doctor(tmp_path)["smc-r"]
    assert verdict is W and "tcp2smc is absent" in message
    write(tmp_path, "proc/sys/net/smc/tcp2smc", "0\n")
    assert doctor(tmp_path)["smc-r"] == (P, "smc loaded; net.smc.tcp2smc present (host value 0)")
    write(tmp_path, "sys/module/ib_core/parameters/netns_mode", "N\n")
    assert "netns_mode is exclusive" in doctor(tmp_path)["smc-r"][1]
    (tmp_path / "sys/module/smc").rmdir()
    verdict, message = doctor(tmp_path)["smc-r"]
    assert verdict is W and message.startswith("the smc module is not loaded")


def test_smc_r_in_a_pod_says_why_its_tcp_stays_tcp(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    write(tmp_path, "proc/sys/net/smc/tcp2smc", "0\n")
    in_pod = {"SMCR_PNET": "00163E2F3775"}
    verdict, message = doctor(tmp_path, environ=in_pod)["smc-r"]
    assert verdict is W and "this pod's net.smc.tcp2smc is 0: its TCP stays TCP" in message
    assert "smcr.mode is webhook or prestart" in message
    write(tmp_path, "proc/sys/net/smc/tcp2smc", "1\n")
    assert doctor(tmp_path, environ=in_pod)["smc-r"] == (
        P,
        "SMC-R is on in this pod (net.smc.tcp2smc=1)",
    )


# --- NCCL environment -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("variant", "env", "verdict", "text"),
    [
        (
            "gpu",
            {"NCCL_IB_HCA": "erdma", "NCCL_IB_GID_INDEX": "1"},
            P,
            "NCCL_IB_HCA='erdma' selects erdma_0, erdma_1; GID 1 is RoCE v2 on erdma_0, erdma_1",
        ),
        ("gpu", {"NCCL_IB_HCA": "=erdma_1:1"}, P, "selects erdma_1"),
        ("gpu", {"NCCL_IB_GID_INDEX": "-1"}, P, "NCCL_IB_GID_INDEX=-1 lets NCCL choose"),
        (
            "gpu",
            {"NCCL_IB_HCA": "mlx5"},
            F,
            "NCCL_IB_HCA='mlx5' selects no device (present: erdma_0, erdma_1)",
        ),
        ("gpu", {"NCCL_IB_HCA": "^erdma"}, F, "selects no device"),
        ("gpu", {"NCCL_IB_HCA": "erdma_0:2"}, F, "selects no device"),
        ("gpu", {"NCCL_IB_HCA": "erdma_0:one"}, F, "port 'one' of 'erdma_0:one' is not a number"),
        (
            "gpu",
            {"NCCL_IB_GID_INDEX": "3"},
            F,
            "erdma_0 GID 3 is empty; its IPv4 RoCE v2 GIDs are at 1",
        ),
        ("gpu", {"NCCL_IB_GID_INDEX": "one"}, F, "NCCL_IB_GID_INDEX='one' is not an integer"),
        ("default", {"NCCL_IB_GID_INDEX": "1"}, F, "erdma_0 has no RoCE v2 GIDs (iWARP mode?)"),
        ("driver-not-loaded", {"NCCL_IB_HCA": "erdma"}, F, "there are no RDMA devices"),
        ("gpu", {}, S, "NCCL_IB_HCA and NCCL_IB_GID_INDEX are not set"),
    ],
)
def test_nccl_env(tmp_path: Path, variant, env, verdict, text):
    fakehost.build(tmp_path, variant)
    got = doctor(tmp_path, environ=env)["nccl-env"]
    assert got[0] is verdict and text in got[1], got


# --- the command ----------------------------------------------------------------------------
NO_NCCL = {"NCCL_IB_HCA": None, "NCCL_IB_GID_INDEX": None}
IPC_LOCK_STATUS = "Name:\terdma\nCapEff:\t0000000000004000\n"


@needs_root
def test_a_healthy_node_passes_every_check_and_exits_zero(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    user_space(tmp_path)
    make_usable(tmp_path)
    write(tmp_path, "proc/self/status", IPC_LOCK_STATUS)
    result = CliRunner().invoke(doctor_command, ["--root", str(tmp_path)], env=NO_NCCL)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["PASS"] * 10 + ["SKIP"]
    assert lines[-1] == "10 PASS, 0 WARN, 0 FAIL, 1 SKIP"


def test_json_output_and_exit_code(tmp_path: Path):
    fakehost.build(tmp_path, "driver-not-loaded")
    result = CliRunner().invoke(doctor_command, ["--root", str(tmp_path), "--json"], env=NO_NCCL)
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["schema"] == 1 and data["ok"] is False and data["root"] == str(tmp_path)
    assert [c["name"] for c in data["checks"]] == [c.name for c in REGISTRY]
    first = data["checks"][0]
    assert first["verdict"] == "FAIL" and first["remedy"].startswith("install and load the eRDMA")
    assert data["summary"]["FAIL"] == sum(c["verdict"] == "FAIL" for c in data["checks"])


def test_proc_root_is_read_from_where_it_is_told(tmp_path: Path):
    fakehost.build(tmp_path / "host", "default")
    write(tmp_path, "hostproc/sys/net/smc/tcp2smc", "1\n")
    args = ["--root", str(tmp_path / "host"), "--proc-root", str(tmp_path / "hostproc")]
    result = CliRunner().invoke(doctor_command, args, env=NO_NCCL)
    assert "PASS  smc-r         smc loaded; net.smc.tcp2smc present (host value 1)" in (
        result.output
    )


def test_a_crashing_check_is_reported_not_raised(tmp_path: Path):
    fakehost.build(tmp_path, "default")

    def broken() -> tuple[int, int]:
        raise OSError("getrlimit refused")

    assert doctor(tmp_path, memlock=broken)["memlock"] == (
        F,
        "check crashed: OSError: getrlimit refused",
    )


def test_check_names_are_unique():
    with pytest.raises(ValueError, match="doctor check 'memlock' registered twice"):
        check("memlock", "again")(lambda ctx: None)  # type: ignore[arg-type,return-value]


@pytest.mark.skipif(
    bool(os.listdir("/sys/class/infiniband")) if os.path.isdir("/sys/class/infiniband") else False,
    reason="this machine has RDMA devices in /sys/class/infiniband",
)
def test_this_machine_without_rdma_says_so_and_fails():
    result = CliRunner().invoke(doctor_command, ["--root", "/"], env=NO_NCCL)
    assert result.exit_code == 1
    assert "FAIL  rdma-devices  no RDMA devices in /sys/class/infiniband" in result.output
    verdicts = {
        line.split()[1]: line.split()[0]
        for line in result.output.splitlines()[:-1]
        if line.split()[0] in ("PASS", "WARN", "FAIL", "SKIP")
    }
    assert verdicts["ports"] == "SKIP" and verdicts["char-devices"] == "SKIP"
    assert verdicts["driver"] == "FAIL" and verdicts["rdma-cm"] == "SKIP"


def test_module_loaded_without_devices_points_at_the_eri(tmp_path: Path):
    fakehost.build(tmp_path, "driver-not-loaded")
    (tmp_path / "sys/module/erdma").mkdir()
    findings = {f.check: f.outcome for f in run_checks(DoctorContext.create(tmp_path))}
    assert findings["rdma-devices"].verdict is F
    assert findings["rdma-devices"].remedy.startswith("attach an ERI to the instance")
    assert findings["driver"].verdict is W
    assert findings["driver"].message.endswith("but no eRDMA device registered")
