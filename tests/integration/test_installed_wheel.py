"""The wheel, installed outside the checkout, runs `erdma --help` and `erdma sim`: no installed
module finds its files through the repository layout, and no test fake ships in it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build from a copy of the sources, so no stale build/ of the checkout leaks in."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (built,) = out.glob("erdma_k8s-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv holding only the wheel; its dependencies come from this interpreter's
    site-packages through a path entry (their own .pth hooks, such as this checkout's editable
    install, are not processed), so the test needs no package index."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def run_installed(python: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_wheel_ships_no_test_fakes(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("erdma/sim/") for n in names)  # erdma sim is product
    assert not [n for n in names if n.startswith(("erdma/testing/", "tests/"))]
    assert not [n for n in names if "ecs" in n.split("/")[-1] and "emulator" in n]


def test_installed_package_is_the_wheel_not_the_checkout(installed: Path, tmp_path: Path):
    result = run_installed(installed, tmp_path, "-c", "import erdma; print(erdma.__file__)")
    assert result.returncode == 0, result.stderr
    assert not Path(result.stdout.strip()).is_relative_to(REPO)


def test_erdma_help_from_the_installed_wheel(installed: Path, tmp_path: Path):
    result = run_installed(installed, tmp_path, "-m", "erdma", "--help")
    assert result.returncode == 0, result.stderr
    for command in ("agent", "controller", "devices", "docker", "cdi", "doctor", "smc", "sim"):
        assert command in result.stdout


def test_erdma_sim_from_the_installed_wheel(installed: Path, tmp_path: Path):
    result = run_installed(installed, tmp_path, "-m", "erdma", "sim")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kubelet: aliyun/erdma registered" in result.stdout
    assert "sample pod asks for aliyun/erdma: 1 -> kubelet allocates ['erdma_0/0']" in result.stdout
    assert "device /dev/infiniband/uverbs0 (rw)" in result.stdout
