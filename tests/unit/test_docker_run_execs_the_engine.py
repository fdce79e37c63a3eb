"""`erdma docker run`: the engine it execs (docker, then podman, or the one chosen), the argv it
hands over, and the errors when there is no engine, image or device.

tests/unit/test_docker_args.py checks the flags themselves.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from erdma.sim import fakehost
from erdma.tools.docker import (
    ENGINE_ERROR,
    DockerExec,
)
from tests.unit.docker_cli_support import ENV0, MEMLOCK, device_flag_of, error_line, invoke_docker


class RecordingExec:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, file: str, argv: list[str]) -> None:
        self.calls.append((file, argv))


def _which(*present: str):
    return lambda name: f"/usr/bin/{name}" if name in present else None


def test_run_dry_run_prints_the_exact_shell_quoted_argv(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    result = invoke_docker(
        "run",
        "--root",
        str(tmp_path),
        "--device",
        "erdma_0",
        "--dry-run",
        "--rm",
        "-e",
        "A=b c",
        "alinux3",
        "sh",
        "-c",
        "ibv_devinfo; echo done",
        obj=DockerExec(which=_which("docker", "podman")),
    )
    assert result.exit_code == 0, result.output
    assert shlex.split(result.stdout) == [
        "docker",
        "run",
        device_flag_of(tmp_path, "uverbs0"),
        device_flag_of(tmp_path, "rdma_cm"),
        *ENV0,
        *MEMLOCK,
        "--net=host",
        "--rm",
        "-e",
        "A=b c",
        "alinux3",
        "sh",
        "-c",
        "ibv_devinfo; echo done",
    ]
    assert "'A=b c'" in result.stdout


def test_run_execs_docker_with_the_flags_and_leaves_later_options_to_docker(tmp_path: Path):
    fakehost.build(tmp_path, "uverbs-swapped")
    recorder = RecordingExec()
    result = invoke_docker(
        "run",
        "--root",
        str(tmp_path),
        "--device",
        "erdma_0",
        "--no-host-net",
        "img",
        "ls",
        "--device",
        "x",
        obj=DockerExec(exec=recorder, which=_which("docker")),
    )
    assert result.exit_code == 0, result.output
    uverbs1, cm = device_flag_of(tmp_path, "uverbs1"), device_flag_of(tmp_path, "rdma_cm")
    assert recorder.calls == [
        ("docker", ["docker", "run", uverbs1, cm, *ENV0, *MEMLOCK, "img", "ls", "--device", "x"])
    ]


def test_double_dash_hands_an_engine_option_erdma_also_has_to_the_engine(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    recorder = RecordingExec()
    result = invoke_docker(
        "run",
        "--root",
        str(tmp_path),
        "--device",
        "erdma_0",
        "--",
        "--device",
        "/dev/null:/dev/mynull",
        "img",
        "true",
        obj=DockerExec(exec=recorder, which=_which("docker")),
    )
    assert result.exit_code == 0, result.output
    argv = recorder.calls[0][1]
    assert argv[-4:] == ["--device", "/dev/null:/dev/mynull", "img", "true"]
    assert device_flag_of(tmp_path, "uverbs1") not in argv


def test_engine_default_is_docker_then_podman_and_can_be_chosen(tmp_path: Path):
    fakehost.build(tmp_path, "default")

    both = _which("docker", "podman")

    def argv0(*flags: str, which=both) -> str:
        recorder = RecordingExec()
        result = invoke_docker(
            "run",
            "--root",
            str(tmp_path),
            *flags,
            "img",
            obj=DockerExec(exec=recorder, which=which),
        )
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
    result = invoke_docker(
        "run", "--root", str(tmp_path), "--dry-run", "img", obj=DockerExec(which=_which())
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("docker run --device=")
    podman = invoke_docker(
        "run", "--root", str(tmp_path), "--dry-run", "img", obj=DockerExec(which=_which("podman"))
    )
    assert podman.stdout.startswith("podman run --device=")


def test_unknown_engine_is_one_line_listing_the_engines(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    line = error_line(
        invoke_docker("run", "--root", str(tmp_path), "--engine", "rkt", "img"), ENGINE_ERROR
    )
    assert (
        line
        == "erdma docker run: error: invalid --engine 'rkt': accepted values are docker, podman"
    )


def test_no_engine_on_path_says_what_was_looked_for(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    result = invoke_docker("run", "--root", str(tmp_path), "img", obj=DockerExec(which=_which()))
    line = error_line(result, ENGINE_ERROR)
    assert "no container engine found on PATH (looked for docker, podman)" in line


def test_run_without_image_fails_like_docker_run(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    result = invoke_docker("run", "--root", str(tmp_path), obj=DockerExec(which=_which("docker")))
    assert "missing IMAGE" in error_line(result, ENGINE_ERROR)


def test_run_with_no_device_does_not_exec(tmp_path: Path):
    fakehost.build(tmp_path, "driver-not-loaded")
    recorder = RecordingExec()
    result = invoke_docker(
        "run", "--root", str(tmp_path), "img", obj=DockerExec(exec=recorder, which=_which("docker"))
    )
    assert "no RDMA devices found" in error_line(result, ENGINE_ERROR)
    assert recorder.calls == []


def test_a_bad_erdma_flag_value_exits_125_too(tmp_path: Path):
    result = invoke_docker("run", "--root")
    assert result.exit_code == ENGINE_ERROR


def test_run_with_an_engine_cli_that_does_not_exist_says_so(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    missing = tmp_path / "no-such-docker"
    result = invoke_docker("run", "--root", str(tmp_path), "--engine-cli", str(missing), "img")
    line = error_line(result, ENGINE_ERROR)
    assert f"--engine-cli {str(missing)!r} not found in PATH; install docker" in line
