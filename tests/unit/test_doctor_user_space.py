"""`erdma doctor`'s user-space check on fixture roots standing in for container images: what is
missing, the package that holds it for the image's package manager, and the example Dockerfile
for the image's OS (from its os-release)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from erdma.sim import fakehost
from erdma.tools.doctor import doctor_command
from tests.unit.doctor_support import ALINUX3, F, P, S, W, doctor, user_space, write

ROOT = Path(__file__).resolve().parents[2]
#: os-release of each image family's base image, and what the doctor must say for it
FAMILIES = {
    "alinux3": (ALINUX3, "examples/images/yum/Dockerfile", "BASE_IMAGE=<registry>/alinux3/"),
    "alinux2": (
        'NAME="Alibaba Cloud Linux (Aliyun Linux)"\nID="alinux"\nVERSION_ID="2.1903"\n',
        "examples/images/yum/Dockerfile",
        "BASE_IMAGE=<registry>/alinux2/alinux2:<tag>",
    ),
    "centos7": (
        'NAME="CentOS Linux"\nID="centos"\nID_LIKE="rhel fedora"\nVERSION_ID="7"\n',
        "examples/images/yum/Dockerfile",
        "BASE_IMAGE=centos:7 --build-arg ERDMA_YUM_DIR=redhat/7",
    ),
    "centos8": (
        'NAME="CentOS Linux"\nID="centos"\nID_LIKE="rhel fedora"\nVERSION_ID="8"\n',
        "examples/images/yum/Dockerfile",
        "BASE_IMAGE=centos:8 --build-arg ERDMA_YUM_DIR=redhat/8",
    ),
    **{
        f"ubuntu{release}": (
            f'NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="{release}"\n',
            "examples/images/ubuntu/Dockerfile",
            f"UBUNTU_RELEASE={release}",
        )
        for release in ("18.04", "20.04", "22.04", "24.04")
    },
}
APT = "libibverbs1 ibverbs-providers ibverbs-utils librdmacm1"
YUM = "libibverbs ibverbs-providers ibverbs-utils librdmacm"


def image_root(root: Path, os_release: str | None, packages: bool) -> Path:
    """A container's view: the fixture's devices, this os-release, with or without the packages."""
    fakehost.build(root, "default")
    if packages:
        user_space(root)
    if os_release is not None:
        write(root, "etc/os-release", os_release)
    return root


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_without_the_packages_the_doctor_names_them_and_the_example(tmp_path: Path, family: str):
    os_release, example, build_arg = FAMILIES[family]
    root = image_root(tmp_path, os_release, packages=False)
    result = CliRunner().invoke(doctor_command, ["--root", str(root), "--json"])
    assert result.exit_code == 1
    (found,) = [c for c in json.loads(result.output)["checks"] if c["name"] == "user-space"]
    assert found["verdict"] == "FAIL"
    apt = family.startswith("ubuntu")
    assert found["message"] == (
        f"missing libibverbs.so.1 ({'libibverbs1' if apt else 'libibverbs'}), erdma provider "
        "liberdma-rdmav*.so (ibverbs-providers), ibv_devices (ibverbs-utils), librdmacm.so.1 "
        f"({'librdmacm1' if apt else 'librdmacm'}): applications here cannot see eRDMA devices"
    )
    assert found["remedy"].startswith(f"build the image from {example} of erdma-k8s (docker build")
    assert f"--build-arg {build_arg}" in found["remedy"]
    assert f"installs {APT if apt else YUM} from the eRDMA package mirror" in found["remedy"]
    assert (ROOT / example).is_file()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_with_the_packages_the_check_passes(tmp_path: Path, family: str):
    root = image_root(tmp_path, FAMILIES[family][0], packages=True)
    assert doctor(root)["user-space"] == (
        P,
        "installed: /usr/lib64/libibverbs.so.1, /usr/lib64/libibverbs/liberdma-rdmav34.so, "
        "/usr/bin/ibv_devices, /usr/lib64/librdmacm.so.1",
    )


def test_ubuntu_paths_are_found(tmp_path: Path):
    root = image_root(tmp_path, FAMILIES["ubuntu22.04"][0], packages=False)
    multiarch = "usr/lib/x86_64-linux-gnu"
    for rel in ("libibverbs.so.1.14.50.0", "libibverbs/liberdma-rdmav34.so", "librdmacm.so.1"):
        write(root, f"{multiarch}/{rel}", "")
    write(root, "usr/bin/ibv_devices", "")
    verdict, message = doctor(root)["user-space"]
    assert verdict is P and f"/{multiarch}/libibverbs.so.1.14.50.0" in message


def test_only_the_provider_missing_fails_naming_ibverbs_providers(tmp_path: Path):
    root = image_root(tmp_path, FAMILIES["centos7"][0], packages=True)
    (root / "usr/lib64/libibverbs/liberdma-rdmav34.so").unlink()
    verdict, message = doctor(root)["user-space"]
    assert (verdict, message) == (
        F,
        "missing erdma provider liberdma-rdmav*.so (ibverbs-providers): applications here "
        "cannot see eRDMA devices",
    )


def test_tools_and_librdmacm_missing_warn(tmp_path: Path):
    root = image_root(tmp_path, FAMILIES["ubuntu24.04"][0], packages=True)
    (root / "usr/bin/ibv_devices").unlink()
    (root / "usr/lib64/librdmacm.so.1").unlink()
    assert doctor(root)["user-space"] == (
        W,
        "missing ibv_devices (ibverbs-utils), librdmacm.so.1 (librdmacm1): the device cannot be "
        "checked by hand (ibv_devices, ibv_devinfo); rdma_cm applications cannot connect",
    )


@pytest.mark.parametrize(
    ("os_release", "remedy_tail"),
    [
        (
            'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n',
            f"no Dockerfile for Debian GNU/Linux 12 (bookworm) (it covers Alibaba Cloud Linux "
            f"2/3, CentOS 7/8, Ubuntu 18.04-24.04); install from the eRDMA package mirror: "
            f"apt-get install {APT}",
        ),
        (
            'ID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.3"\n',
            f"no Dockerfile for rocky 9.3 (it covers Alibaba Cloud Linux 2/3, CentOS 7/8, Ubuntu "
            f"18.04-24.04); install from the eRDMA package mirror: yum install {YUM}",
        ),
        (
            None,
            f"no Dockerfile for an image without /etc/os-release (it covers Alibaba Cloud Linux "
            f"2/3, CentOS 7/8, Ubuntu 18.04-24.04); install from the eRDMA package mirror: "
            f"apt-get install {APT}, or yum install {YUM}",
        ),
    ],
    ids=["debian", "rocky", "no-os-release"],
)
def test_an_os_without_an_example_gets_the_install_command(
    tmp_path: Path, os_release: str | None, remedy_tail: str
):
    root = image_root(tmp_path, os_release, packages=False)
    result = CliRunner().invoke(doctor_command, ["--root", str(root)])
    lines = result.output.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("FAIL  user-space")]
    assert lines[at + 1].strip() == f"remedy: examples/images/ of erdma-k8s has {remedy_tail}"


def test_a_node_without_erdma_does_not_need_the_user_space(tmp_path: Path):
    fakehost.build(tmp_path, "lingjun")
    assert doctor(tmp_path)["user-space"][0] is S
