"""`erdma docker run` through real dockerd and Podman: what the container actually gets.

The fixture host's /dev nodes are real char devices (mknod as root) with the sysfs
major:minor; there is no RDMA driver behind them, so open() in the container fails with
ENXIO once the device cgroup let the node through, and with EPERM when it did not.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from erdma.sim import fakehost
from tests.engines_support import IMAGE, Kit, Probe, host_netns, probe_script, require

pytestmark = pytest.mark.root
ENGINES = ["docker", "podman"]
UVERBS0, UVERBS1 = "/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1"
RDMA_CM = "/dev/infiniband/rdma_cm"
#: the sandbox cannot raise RLIMIT_MEMLOCK above 8 MiB; a finite limit lets the run happen
MEMLOCK_8M = ("--memlock", "8388608")


def _engine_options(kit: Kit, engine: str) -> list[str]:
    """Engine options of every run: remove the container, never pull, allow mknod in /tmp."""
    if engine == "podman":
        return ["--rm", "--cap-add", "MKNOD", *kit.podman_run_options()]
    return ["--rm", "--pull=never"]


def _erdma_run(
    kit: Kit, engine: str, root: Path, *flags: str, script: str = "", more: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`erdma docker run [flags] -- [engine options] [more] IMAGE sh -c script`."""
    options = [*_engine_options(kit, engine), *more]
    argv = [
        "docker",
        "run",
        "--engine",
        engine,
        "--root",
        str(root),
        *flags,
        "--",
        *options,
        IMAGE,
        "sh",
        "-c",
        script or probe_script(),
    ]
    return kit.erdma(*argv)


def _probe(done: subprocess.CompletedProcess[str]) -> Probe:
    assert done.returncode == 0, f"rc={done.returncode}\n{done.stdout}\n{done.stderr}"
    return Probe.parse(done.stdout)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def kit(engine: str) -> Kit:
    return require(engine)


def test_the_device_asked_for_is_mapped_and_the_other_is_denied(kit, engine, tmp_path):
    fakehost.build(tmp_path, "default")
    done = _erdma_run(
        kit,
        engine,
        tmp_path,
        "--device",
        "erdma_0",
        *MEMLOCK_8M,
        script=probe_script(mknod=[(231, 193)]),
    )
    probe = _probe(done)
    assert probe.infiniband() == {UVERBS0: (231, 192), RDMA_CM: (10, 58)}, probe.raw
    assert probe.opens[UVERBS0] == "ENXIO"  # through the device cgroup, no driver behind
    assert probe.opens[RDMA_CM] in ("ENXIO", "ENODEV")  # through as well: not EPERM
    # erdma_1's uverbs1 (231:193) was not asked for: the cgroup refuses it even when made
    assert probe.opens[probe.made(231, 193)] == "EPERM", probe.raw
    assert probe.netns == host_netns()  # --net=host
    assert probe.memlock == "8192"  # KiB: the finite --memlock reached the container
    # the env the device plugin gives a pod with erdma_0
    assert probe.env == {"ERDMA_DEVICES": "erdma_0", "SMCR_PNET": "00163E2F3775"}, probe.raw


def test_without_device_every_erdma_device_is_mapped(kit, engine, tmp_path):
    fakehost.build(tmp_path, "uverbs-swapped")
    probe = _probe(_erdma_run(kit, engine, tmp_path, *MEMLOCK_8M))
    assert probe.infiniband() == {UVERBS0: (231, 192), UVERBS1: (231, 193), RDMA_CM: (10, 58)}
    assert probe.opens[UVERBS0] == probe.opens[UVERBS1] == "ENXIO"


def test_uverbs_follows_sysfs_not_the_device_name(kit, engine, tmp_path):
    fakehost.build(tmp_path, "uverbs-swapped")  # erdma_0 is uverbs1
    probe = _probe(
        _erdma_run(
            kit,
            engine,
            tmp_path,
            "--device",
            "erdma_0",
            *MEMLOCK_8M,
            script=probe_script(mknod=[(231, 192)]),
        )
    )
    assert probe.infiniband() == {UVERBS1: (231, 193), RDMA_CM: (10, 58)}
    assert probe.opens[probe.made(231, 192)] == "EPERM"


def test_a_lingjun_node_maps_its_hcas_says_so_and_mad_nodes_only_when_asked(kit, engine, tmp_path):
    fakehost.build(tmp_path, fakehost.lingjun_node(hcas=2))
    done = _erdma_run(kit, engine, tmp_path, *MEMLOCK_8M)
    probe = _probe(done)
    assert probe.infiniband() == {UVERBS0: (231, 192), UVERBS1: (231, 193), RDMA_CM: (10, 58)}
    assert "no eRDMA device on this host; mapping the other RDMA devices: mlx5_0, mlx5_1" in (
        done.stderr
    )
    with_mad = _probe(_erdma_run(kit, engine, tmp_path, "--device", "mlx5_1", "--mad", *MEMLOCK_8M))
    assert with_mad.infiniband() == {
        UVERBS1: (231, 193),
        "/dev/infiniband/umad1": (231, 1),
        "/dev/infiniband/issm1": (231, 65),
        RDMA_CM: (10, 58),
    }


def test_the_containers_exit_code_is_erdmas(kit, engine, tmp_path):
    fakehost.build(tmp_path, "default")
    assert _erdma_run(kit, engine, tmp_path, *MEMLOCK_8M, script="exit 7").returncode == 7
    missing_image = kit.erdma(
        "docker",
        "run",
        "--engine",
        engine,
        "--root",
        str(tmp_path),
        *MEMLOCK_8M,
        "--",
        *_engine_options(kit, engine),
        "docker.io/local/no-such-image:e",
        "true",
    )
    assert missing_image.returncode == 125  # the engine's own error code, passed through


def test_double_dash_passes_an_option_erdma_also_has_to_the_engine(kit, engine, tmp_path):
    fakehost.build(tmp_path, "default")
    # `--device` after `--` is the engine's: a host path, not an RDMA device name
    done = _erdma_run(
        kit,
        engine,
        tmp_path,
        "--device",
        "erdma_1",
        *MEMLOCK_8M,
        more=("--device", "/dev/null:/dev/infiniband/mynull"),
    )
    probe = _probe(done)
    assert probe.infiniband() == {
        UVERBS1: (231, 193),
        RDMA_CM: (10, 58),
        "/dev/infiniband/mynull": (1, 3),
    }


def test_dry_run_prints_a_command_that_runs_as_printed(kit, engine, tmp_path):
    fakehost.build(tmp_path, "default")
    printed = _erdma_run(kit, engine, tmp_path, "--device", "erdma_0", *MEMLOCK_8M, "--dry-run")
    assert printed.returncode == 0, printed.stderr
    argv = shlex.split(printed.stdout)
    assert argv[:2] == [engine, "run"]
    probe = _probe(kit.run(["sh", "-c", printed.stdout]))
    assert probe.infiniband() == {UVERBS0: (231, 192), RDMA_CM: (10, 58)}


def test_default_memlock_is_unlimited_which_this_sandbox_cannot_grant(kit, engine, tmp_path):
    fakehost.build(tmp_path, "default")
    printed = _erdma_run(kit, engine, tmp_path, "--dry-run")
    assert "--ulimit memlock=-1 --cap-add=IPC_LOCK" in printed.stdout
    done = _erdma_run(kit, engine, tmp_path, script="ulimit -l")
    if kit.sysres:
        assert done.returncode == 0 and done.stdout.strip() == "unlimited", done.stderr
    else:  # no CAP_SYS_RESOURCE here: the engine tried to set it, and the kernel said no
        assert done.returncode in (125, 126), done.stderr
        assert "rlimit" in done.stderr and "operation not permitted" in done.stderr.lower()


def test_bad_input_never_reaches_the_engine(kit, engine, tmp_path):
    fakehost.build(tmp_path, "default")
    for flags, message in (
        (["--device", "erdma_9"], "unknown --device 'erdma_9': devices present are erdma_0"),
        (["--memlock", "lots"], "invalid --memlock 'lots': accepted values are"),
    ):
        done = _erdma_run(kit, engine, tmp_path, *flags)
        assert done.returncode == 125 and done.stdout == ""
        assert done.stderr.startswith(f"erdma docker run: error: {message}")
        assert done.stderr.count("\n") == 1
