"""`erdma doctor`: one verdict and remedy per check, on every fixture host and on this machine."""

from __future__ import annotations

import json
import os
import resource
import stat
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from erdma.sim import fakehost
from erdma.tools.doctor import doctor_command, run_checks
from erdma.tools.doctor.model import REGISTRY, DoctorContext, Verdict, check

UNLIMITED = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
MIB = 1024 * 1024
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root to mknod real device nodes")
ALINUX3 = 'NAME="Alibaba Cloud Linux"\nVERSION="3 (OpenAnolis Edition)"\nID="alinux"\n'
ALINUX3 += 'VERSION_ID="3"\nPRETTY_NAME="Alibaba Cloud Linux 3 (OpenAnolis Edition)"\n'


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _user_space(root: Path) -> None:
    """What an image with ibverbs-providers and the smc tunables on Alinux 3 holds."""
    _write(root, "etc/os-release", ALINUX3)
    _write(root, "usr/lib64/libibverbs/liberdma-rdmav34.so", "")
    _write(root, "etc/libibverbs.d/erdma.driver", "driver erdma\n")
    _write(root, "proc/sys/net/smc/tcp2smc", "0\n")


def _working_node(root: Path, path: str, sysfs_dev: Path) -> None:
    """Point a node and its sysfs `dev` at 1:3 (mem's null), whose driver every Linux has."""
    sysfs_dev.write_text("1:3\n")
    node = root / path.lstrip("/")
    node.unlink(missing_ok=True)
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))


def _make_usable(root: Path) -> None:
    for entry in (root / "sys/class/infiniband_verbs").glob("uverbs*"):
        _working_node(root, f"/dev/infiniband/{entry.name}", entry.resolve() / "dev")
    if (root / "sys/class/misc/rdma_cm").exists():
        _working_node(root, "/dev/infiniband/rdma_cm", root / "sys/class/misc/rdma_cm/dev")


def _doctor(
    root: Path,
    environ: Mapping[str, str] | None = None,
    memlock: Callable[[], tuple[int, int]] = lambda: UNLIMITED,
    machine: str = "x86_64",
) -> dict[str, tuple[Verdict, str]]:
    ctx = DoctorContext.create(root, environ=environ or {}, memlock=memlock, machine=machine)
    return {f.check: (f.outcome.verdict, f.outcome.message) for f in run_checks(ctx)}


def _verdicts(root: Path) -> dict[str, Verdict]:
    return {name: verdict for name, (verdict, _) in _doctor(root).items()}


# --- every fixture variant ------------------------------------------------------------------
P, W, F, S = Verdict.PASS, Verdict.WARN, Verdict.FAIL, Verdict.SKIP
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
    _user_space(tmp_path)
    got = _verdicts(tmp_path)
    names = ("rdma-devices", "ports", "driver", "provider")
    assert tuple(got[n] for n in names) == EXPECTED[variant]
    assert got["os-image"] is P and got["smc-r"] is P and got["nccl-env"] is S


@needs_root
@pytest.mark.parametrize("variant", sorted(EXPECTED_NODES))
def test_each_fixture_variant_with_working_nodes(tmp_path: Path, variant: str):
    fakehost.build(tmp_path, variant)
    _make_usable(tmp_path)
    got = _verdicts(tmp_path)
    assert (got["char-devices"], got["rdma-cm"]) == EXPECTED_NODES[variant]


def test_driver_mode_is_named(tmp_path: Path):
    fakehost.build(tmp_path / "d", "default")
    fakehost.build(tmp_path / "c", "compat")
    assert "mode default (compat_mode=N" in _doctor(tmp_path / "d")["driver"][1]
    assert "mode compat (compat_mode=Y" in _doctor(tmp_path / "c")["driver"][1]
    lingjun = fakehost.build(tmp_path / "l", "lingjun")
    assert _doctor(lingjun.root)["driver"][1] == "no erdma driver; RDMA devices here use mlx5_core"


def test_upstream_driver_mode_comes_from_the_node_type(tmp_path: Path):
    spec = fakehost.variant("compat")
    fakehost.build(tmp_path, replace(spec, compat_mode=None))
    assert "mode compat (upstream driver" in _doctor(tmp_path)["driver"][1]


def test_port_down_names_the_device_and_the_netdev_to_bring_up(tmp_path: Path):
    fakehost.build(tmp_path, "port-down")
    verdict, message = _doctor(tmp_path)["ports"]
    assert verdict is F
    assert "erdma_0 port 1 DOWN (Disabled; netdev eth1)" in message


def test_no_rdma_cm_in_default_mode_fails_but_compat_mode_does_not_need_it(tmp_path: Path):
    fakehost.build(tmp_path / "d", "no-rdma-cm")
    verdict, message = _doctor(tmp_path / "d")["rdma-cm"]
    assert verdict is F and "default mode needs rdma_cm, and this host has none" in message
    compat = replace(fakehost.variant("compat"), rdma_cm=False)
    fakehost.build(tmp_path / "c", compat)
    verdict, message = _doctor(tmp_path / "c")["rdma-cm"]
    assert verdict is P and "compat mode does not need it" in message


# --- char devices: missing vs present-without-driver vs usable ------------------------------
@needs_root
def test_fixture_nodes_exist_but_no_driver_is_behind_them(tmp_path: Path):
    fakehost.build(tmp_path, "uverbs-swapped")
    got = _doctor(tmp_path)
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
    verdict, message = _doctor(tmp_path)["char-devices"]
    assert verdict is F
    assert message == (
        "missing: /dev/infiniband/uverbs0 (erdma_0), /dev/infiniband/uverbs1 (erdma_1)"
    )


def test_a_regular_file_is_not_a_device_node(tmp_path: Path):
    host = fakehost.build(tmp_path, "default")
    host.remove_node("/dev/infiniband/uverbs0")
    (tmp_path / "dev/infiniband/uverbs0").write_text("")
    verdict, message = _doctor(tmp_path)["char-devices"]
    assert verdict is F
    assert "/dev/infiniband/uverbs0 (erdma_0) is not a character device" in message


@needs_root
def test_usable_nodes_pass(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    _make_usable(tmp_path)
    got = _doctor(tmp_path)
    assert got["char-devices"] == (
        P,
        "open read-write: /dev/infiniband/uverbs0 (erdma_0), /dev/infiniband/uverbs1 (erdma_1)",
    )
    assert got["rdma-cm"][0] is P


@needs_root
def test_container_given_one_device_warns_about_the_others(tmp_path: Path):
    host = fakehost.build(tmp_path, "default")
    _make_usable(tmp_path)
    host.remove_node("/dev/infiniband/uverbs1")
    verdict, message = _doctor(tmp_path)["char-devices"]
    assert verdict is W
    assert "usable: /dev/infiniband/uverbs0 (erdma_0); not in this /dev: " in message


@needs_root
def test_stale_node_after_a_driver_reload_is_named(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    node = tmp_path / "dev/infiniband/uverbs0"
    node.unlink()
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(231, 200))
    verdict, message = _doctor(tmp_path)["char-devices"]
    assert verdict is F
    assert "uverbs0 (erdma_0) is 231:200 but sysfs says 231:192: a stale node" in message


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
        _write(tmp_path, "proc/self/status", f"Name:\terdma\nCapEff:\t{cap_eff}\n")
    got = _doctor(tmp_path, memlock=lambda: limit)["memlock"]
    assert got[0] is verdict and text in got[1]


def test_provider(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    verdict, message = _doctor(tmp_path)["provider"]
    assert verdict is F and "no liberdma-rdmav*.so" in message
    _write(tmp_path, "usr/lib/x86_64-linux-gnu/libibverbs/liberdma-rdmav34.so", "")
    verdict, message = _doctor(tmp_path)["provider"]
    assert verdict is W and "/etc/libibverbs.d/erdma.driver is missing" in message
    _write(tmp_path, "etc/libibverbs.d/erdma.driver", "driver erdma\n")
    assert _doctor(tmp_path)["provider"] == (
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
        _write(tmp_path, "etc/os-release", os_release)
    got = _doctor(tmp_path, machine=machine)["os-image"]
    assert got[0] is verdict and text in got[1]


def test_smc_r(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    verdict, message = _doctor(tmp_path)["smc-r"]
    assert verdict is W and "tcp2smc is absent" in message
    _write(tmp_path, "proc/sys/net/smc/tcp2smc", "0\n")
    assert _doctor(tmp_path)["smc-r"] == (P, "smc loaded; net.smc.tcp2smc present (host value 0)")
    _write(tmp_path, "sys/module/ib_core/parameters/netns_mode", "N\n")
    assert "netns_mode is exclusive" in _doctor(tmp_path)["smc-r"][1]
    (tmp_path / "sys/module/smc").rmdir()
    verdict, message = _doctor(tmp_path)["smc-r"]
    assert verdict is W and message.startswith("the smc module is not loaded")


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
    got = _doctor(tmp_path, environ=env)["nccl-env"]
    assert got[0] is verdict and text in got[1], got


# --- the command ----------------------------------------------------------------------------
NO_NCCL = {"NCCL_IB_HCA": None, "NCCL_IB_GID_INDEX": None}
IPC_LOCK_STATUS = "Name:\terdma\nCapEff:\t0000000000004000\n"


@needs_root
def test_a_healthy_node_passes_every_check_and_exits_zero(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    _user_space(tmp_path)
    _make_usable(tmp_path)
    _write(tmp_path, "proc/self/status", IPC_LOCK_STATUS)
    result = CliRunner().invoke(doctor_command, ["--root", str(tmp_path)], env=NO_NCCL)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["PASS"] * 9 + ["SKIP"]
    assert lines[-1] == "9 PASS, 0 WARN, 0 FAIL, 1 SKIP"


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
    _write(tmp_path, "hostproc/sys/net/smc/tcp2smc", "1\n")
    args = ["--root", str(tmp_path / "host"), "--proc-root", str(tmp_path / "hostproc")]
    result = CliRunner().invoke(doctor_command, args, env=NO_NCCL)
    assert "PASS  smc-r         smc loaded; net.smc.tcp2smc present (host value 1)" in (
        result.output
    )


def test_a_crashing_check_is_reported_not_raised(tmp_path: Path):
    fakehost.build(tmp_path, "default")

    def broken() -> tuple[int, int]:
        raise OSError("getrlimit refused")

    assert _doctor(tmp_path, memlock=broken)["memlock"] == (
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
