"""Where engines cannot run, the engine tests skip and say exactly what is missing.

These run everywhere (no engine needed): they check the reasons `tests.engines_support`
gives, and which engine versions the kit runs where it does.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engines_support import REPO, Kit, find_kit, require


def test_never_set_up_names_the_env_file_and_how_to_set_up(monkeypatch, tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("as non-root the not-root reason comes first (tested below)")
    monkeypatch.setenv("ENGINE_STATE", str(tmp_path / "none"))
    reason = find_kit()
    assert isinstance(reason, str)
    assert f"container engines not set up: {tmp_path}/none/env is missing" in reason
    assert "setup.sh" in reason and ".ci/run" in reason
    with pytest.raises(pytest.skip.Exception, match="container engines not set up"):
        require("docker")


def test_not_root_is_named_with_the_uid():
    code = "from tests.engines_support import find_kit; print(find_kit())"
    if os.geteuid() == 0:  # look from an unprivileged process
        argv = [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-c",
            code,
        ]
    else:
        argv = [sys.executable, "-c", code]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("engine tests need root (setup.sh, mknod'd device nodes")
    assert f"running as uid {65534 if os.geteuid() == 0 else os.geteuid()}" in done.stdout


def test_an_engine_the_kit_did_not_set_up_is_named(tmp_path: Path):
    kit = Kit(tmp_path, env={"PATH": os.environ.get("PATH", "")}, sysres=False)
    assert kit.missing("podman") == (
        f"podman was not set up by the kit (no CONTAINERS_CONF in {tmp_path}/env)"
    )
    assert kit.missing("docker") == (
        f"docker was not set up by the kit (no DOCKER_HOST in {tmp_path}/env)"
    )
    assert kit.missing("containerd") == (
        "containerd CRI socket (CONTAINERD_ADDRESS unset) is absent"
    )
    dead = Kit(tmp_path, env={**kit.env, "DOCKER_HOST": f"unix://{tmp_path}/d.sock"}, sysres=False)
    reason = dead.missing("docker")
    assert reason is not None and reason.startswith("dockerd does not answer")


def test_a_containerd_socket_nobody_listens_on_is_named(tmp_path: Path):
    """A machine restart leaves containerd's socket file behind with nothing behind it: the
    CRI tests skip and say so, as they do for a dead dockerd, rather than fail."""
    (tmp_path / "cri").mkdir()
    (tmp_path / "cri/api_pb2_grpc.py").write_text("")
    stale = tmp_path / "containerd.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(stale))  # bound, never listening, closed: a socket file, no daemon
    env = {"PATH": os.environ.get("PATH", ""), "CONTAINERD_ADDRESS": str(stale)}
    reason = Kit(tmp_path, env=env, sysres=False).missing("containerd")
    assert reason is not None and reason.startswith("containerd does not answer"), reason


def test_the_kit_runs_engines_that_load_cdi():
    kit = find_kit()
    if isinstance(kit, str):
        pytest.skip(kit)
    versions = {e: kit.version(e) for e in ("podman", "docker", "containerd") if not kit.missing(e)}
    if not versions:
        pytest.skip("no engine of the kit is running")
    major = {e: int(v.split(".")[0]) for e, v in versions.items()}
    assert major.get("podman", 4) >= 4, versions
    assert major.get("docker", 25) >= 25, versions  # CDI arrived in Docker 25
    assert versions.get("containerd", "1.7") >= "1.7", versions
    print(f"engines: {versions}")
