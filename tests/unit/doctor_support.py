"""Fixture-host helpers the `erdma doctor` tests share."""

from __future__ import annotations

import os
import resource
import stat
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from erdma.tools.doctor import run_checks
from erdma.tools.doctor.model import DoctorContext, Verdict

P, W, F, S = Verdict.PASS, Verdict.WARN, Verdict.FAIL, Verdict.SKIP
UNLIMITED = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
MIB = 1024 * 1024
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root to mknod real device nodes")
ALINUX3 = 'NAME="Alibaba Cloud Linux"\nVERSION="3 (OpenAnolis Edition)"\nID="alinux"\n'
ALINUX3 += 'VERSION_ID="3"\nPRETTY_NAME="Alibaba Cloud Linux 3 (OpenAnolis Edition)"\n'


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def user_space(root: Path) -> None:
    """What an image with ibverbs-providers and the smc tunables on Alinux 3 holds."""
    write(root, "etc/os-release", ALINUX3)
    write(root, "usr/lib64/libibverbs/liberdma-rdmav34.so", "")
    write(root, "etc/libibverbs.d/erdma.driver", "driver erdma\n")
    write(root, "usr/lib64/libibverbs.so.1", "")
    write(root, "usr/lib64/librdmacm.so.1", "")
    write(root, "usr/bin/ibv_devices", "")
    write(root, "proc/sys/net/smc/tcp2smc", "0\n")


def working_node(root: Path, path: str, sysfs_dev: Path) -> None:
    """Point a node and its sysfs `dev` at 1:3 (mem's null), whose driver every Linux has."""
    sysfs_dev.write_text("1:3\n")
    node = root / path.lstrip("/")
    node.unlink(missing_ok=True)
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))


def make_usable(root: Path) -> None:
    for entry in (root / "sys/class/infiniband_verbs").glob("uverbs*"):
        working_node(root, f"/dev/infiniband/{entry.name}", entry.resolve() / "dev")
    if (root / "sys/class/misc/rdma_cm").exists():
        working_node(root, "/dev/infiniband/rdma_cm", root / "sys/class/misc/rdma_cm/dev")


def doctor(
    root: Path,
    environ: Mapping[str, str] | None = None,
    memlock: Callable[[], tuple[int, int]] = lambda: UNLIMITED,
    machine: str = "x86_64",
) -> dict[str, tuple[Verdict, str]]:
    ctx = DoctorContext.create(root, environ=environ or {}, memlock=memlock, machine=machine)
    return {f.check: (f.outcome.verdict, f.outcome.message) for f in run_checks(ctx)}


def verdicts(root: Path) -> dict[str, Verdict]:
    return {name: verdict for name, (verdict, _) in doctor(root).items()}
