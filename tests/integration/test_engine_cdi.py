"""The spec from `erdma cdi generate`, consumed by Podman 4.3, dockerd and containerd CRI.

Each engine resolves `aliyun.com/erdma=<name>` from the spec and the test looks inside the
container: the injected uverbs node and rdma_cm with their sysfs major:minor, the device's
SMCR_PNET, and a node of a device not asked for refused by the device cgroup (EPERM).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from erdma import cdi
from erdma.host.devices import scan
from erdma.sim import fakehost
from tests.engines_support import (
    IMAGE,
    KIT_SPEC,
    Kit,
    Probe,
    cri_run,
    own_cdi_dir,
    probe_script,
    require,
)

pytestmark = pytest.mark.root
UVERBS0, UVERBS1 = "/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1"
RDMA_CM = "/dev/infiniband/rdma_cm"
PNET0, PNET1 = "00163E2F3775", "00163E2F3111"  # the fixture's eth1 / eth2


def _generate(kit: Kit, root: Path, out: Path, *extra: str) -> list[str]:
    """`erdma cdi generate` as a user runs it; returns the device names it printed."""
    done = kit.erdma("cdi", "generate", "--root", str(root), "--output-dir", str(out), *extra)
    assert done.returncode == 0, done.stderr
    assert "(cdiVersion 0.5.0)" in done.stdout
    return done.stdout.splitlines()[1:]


def _podman(kit: Kit, spec_dir: Path, name: str, script: str) -> subprocess.CompletedProcess[str]:
    argv = [
        "podman-cdi",
        "run",
        "--rm",
        "--cap-add",
        "MKNOD",
        "--device",
        name,
        IMAGE,
        "sh",
        "-c",
        script,
    ]
    return kit.run(argv, CDI_DIR=str(spec_dir))


def _docker(kit: Kit, name: str, script: str) -> subprocess.CompletedProcess[str]:
    return kit.run(
        ["docker", "run", "--rm", "--pull=never", "--device", name, IMAGE, "sh", "-c", script]
    )


def _probe(done: subprocess.CompletedProcess[str]) -> Probe:
    assert done.returncode == 0, f"rc={done.returncode}\n{done.stdout}\n{done.stderr}"
    return Probe.parse(done.stdout)


def _probe_run(run: Callable[[], subprocess.CompletedProcess[str]]) -> Probe:
    """`_probe` of ``run()``; a run that succeeded yet printed nothing is run again (twice at
    most). The probe script always prints its netns and memlock lines, so empty output is the
    engine losing a short-lived container's output under load (seen once with `docker run`
    on a loaded machine), not a spec it could not resolve, which fails the run."""
    for _ in range(2):
        done = run()
        if done.returncode != 0 or done.stdout.strip():
            return _probe(done)
    return _probe(run())


def _until_resolved(run: Callable[[], subprocess.CompletedProcess[str]]) -> Probe:
    """dockerd reloads its spec directory on an inotify event: allow it a moment."""
    deadline = time.monotonic() + 5
    while True:
        done = run()
        if done.returncode == 0 or time.monotonic() > deadline:
            return _probe(done)
        assert "unresolvable CDI devices" in done.stderr, done.stderr
        time.sleep(0.1)


def test_podman_4_3_injects_each_device_and_all(tmp_path: Path):
    kit = require("podman")
    fakehost.build(tmp_path / "host", "default")
    names = _generate(kit, tmp_path / "host", tmp_path / "cdi")
    assert names == [f"{cdi.KIND}={n}" for n in ("erdma_0", "erdma_1", "all")]
    script = probe_script(mknod=[(231, 192), (231, 193)])
    one = _probe(_podman(kit, tmp_path / "cdi", "aliyun.com/erdma=erdma_0", script))
    assert one.infiniband() == {UVERBS0: (231, 192), RDMA_CM: (10, 58)}, one.raw
    assert one.opens[UVERBS0] == "ENXIO" and one.env["SMCR_PNET"] == PNET0
    assert one.opens[one.made(231, 193)] == "EPERM"  # erdma_1 was not asked for
    other = _probe(_podman(kit, tmp_path / "cdi", "aliyun.com/erdma=erdma_1", script))
    assert other.infiniband() == {UVERBS1: (231, 193), RDMA_CM: (10, 58)}
    assert other.env["SMCR_PNET"] == PNET1 and other.opens[other.made(231, 192)] == "EPERM"
    every = _probe(_podman(kit, tmp_path / "cdi", "aliyun.com/erdma=all", script))
    assert every.infiniband() == {UVERBS0: (231, 192), UVERBS1: (231, 193), RDMA_CM: (10, 58)}
    assert every.opens[every.made(231, 192)] == every.opens[every.made(231, 193)] == "ENXIO"


def test_podman_reads_the_json_form_and_refuses_an_unknown_name(tmp_path: Path):
    kit = require("podman")
    fakehost.build(tmp_path / "host", "uverbs-swapped")
    _generate(kit, tmp_path / "host", tmp_path / "cdi", "--format", "json")
    probe = _probe(_podman(kit, tmp_path / "cdi", "aliyun.com/erdma=erdma_0", probe_script()))
    assert probe.infiniband() == {UVERBS1: (231, 193), RDMA_CM: (10, 58)}  # sysfs, not name
    unknown = _podman(kit, tmp_path / "cdi", "aliyun.com/erdma=erdma_7", "true")
    assert unknown.returncode != 0
    assert "unresolvable CDI devices aliyun.com/erdma=erdma_7" in unknown.stderr


def test_podman_resolves_the_devices_after_generate_switched_format(tmp_path: Path):
    """A JSON spec beside the YAML one defines every device twice: Podman would refuse them
    all ("unresolvable CDI devices"); `generate` removes the twin, so the switch is safe."""
    kit = require("podman")
    fakehost.build(tmp_path / "host", "default")
    _generate(kit, tmp_path / "host", tmp_path / "cdi")
    _generate(kit, tmp_path / "host", tmp_path / "cdi", "--format", "json")
    probe = _probe(_podman(kit, tmp_path / "cdi", "aliyun.com/erdma=erdma_0", probe_script()))
    assert probe.infiniband() == {UVERBS0: (231, 192), RDMA_CM: (10, 58)}, probe.raw


def test_dockerd_injects_a_device_and_all(tmp_path: Path):
    kit = require("docker")
    fakehost.build(tmp_path / "host", "default")
    script = probe_script(mknod=[(231, 192)])
    with own_cdi_dir(kit) as spec_dir:
        _generate(kit, tmp_path / "host", spec_dir)
        one = _until_resolved(lambda: _docker(kit, "aliyun.com/erdma=erdma_1", script))
        every = _probe(_docker(kit, "aliyun.com/erdma=all", probe_script()))
        info = kit.run(["docker", "info"]).stdout
    if "Discovered Devices" in info:  # Docker >= 28 lists what it loaded, and spec errors
        for name in ("erdma_0", "erdma_1", "all"):
            assert f"cdi: aliyun.com/erdma={name}" in info, info
        assert "aliyun.com-erdma" not in info, info  # no "Error associated with spec file"
    assert one.infiniband() == {UVERBS1: (231, 193), RDMA_CM: (10, 58)}, one.raw
    assert one.opens[UVERBS1] == "ENXIO" and one.env["SMCR_PNET"] == PNET1
    assert one.opens[one.made(231, 192)] == "EPERM"
    assert every.infiniband() == {UVERBS0: (231, 192), UVERBS1: (231, 193), RDMA_CM: (10, 58)}
    assert every.env["SMCR_PNET"] == PNET0  # `all` carries the first device's
    assert every.env["ERDMA_DEVICES"] == "erdma_0,erdma_1" and one.env["ERDMA_DEVICES"] == "erdma_1"


def test_a_spec_another_run_left_behind_does_not_break_the_next(tmp_path: Path):
    """A run killed mid-test left a second spec of our kind (a JSON twin under another name):
    with it beside ours every aliyun.com/erdma device is unresolvable. The next test still
    gets its device, and afterwards only the kit's own spec is there."""
    kit = require("docker")
    fakehost.build(tmp_path / "host", "default")
    _generate(kit, tmp_path / "host", tmp_path / "left", "--format", "json")
    (leftover,) = (tmp_path / "left").glob("*.json")
    (kit.cdi_dir / "erdma-left-by-a-killed-run.json").write_bytes(leftover.read_bytes())
    with own_cdi_dir(kit) as spec_dir:
        _generate(kit, tmp_path / "host", spec_dir)
        one = _until_resolved(lambda: _docker(kit, "aliyun.com/erdma=erdma_1", probe_script()))
    assert one.infiniband() == {UVERBS1: (231, 193), RDMA_CM: (10, 58)}, one.raw
    ours = sorted(p.name for p in kit.cdi_dir.iterdir() if "erdma" in p.name)
    assert ours == [KIT_SPEC], ours


def test_containerd_cri_injects_by_cdi_devices_and_by_annotation(tmp_path: Path):
    kit = require("containerd")
    fakehost.build(tmp_path / "host", "uverbs-swapped")  # erdma_1 is uverbs0
    script = probe_script(mknod=[(231, 193)])
    with own_cdi_dir(kit) as spec_dir:
        _generate(kit, tmp_path / "host", spec_dir)
        by_field = cri_run(
            kit, {"CDI_devices": [{"name": "aliyun.com/erdma=erdma_1"}]}, ["sh", "-c", script]
        )
        annotation = {"annotations": {cdi.ANNOTATION_KEY: "aliyun.com/erdma=all"}}
        by_annotation = cri_run(kit, annotation, ["sh", "-c", probe_script()])
    one = _probe(by_field)
    assert one.infiniband() == {UVERBS0: (231, 192), RDMA_CM: (10, 58)}, one.raw
    assert one.env["SMCR_PNET"] == PNET1 and one.opens[UVERBS0] == "ENXIO"
    assert one.opens[one.made(231, 193)] == "EPERM"
    every = _probe(by_annotation)
    assert every.infiniband() == {UVERBS0: (231, 192), UVERBS1: (231, 193), RDMA_CM: (10, 58)}


# --- atomic replacement: an engine never reads half a spec ------------------------------
def test_a_torn_spec_breaks_engines_so_the_next_test_means_something(tmp_path: Path):
    kit = require("podman")
    fakehost.build(tmp_path / "host", "default")
    text = cdi.render_spec(cdi.build_spec(scan(tmp_path / "host")))
    (tmp_path / "cdi").mkdir()
    # what a plain open(..., "w").write() leaves for a moment: the first half of the file
    (tmp_path / "cdi/aliyun.com-erdma.yaml").write_text(text[: len(text) // 2])
    torn = _podman(kit, tmp_path / "cdi", "aliyun.com/erdma=erdma_1", "true")
    assert torn.returncode != 0 and "unresolvable CDI devices" in torn.stderr


def test_engines_resolve_the_spec_while_generate_rewrites_it(tmp_path: Path):
    """Two hosts whose specs differ (erdma_0 is uverbs0 on one, uverbs1 on the other) are
    written in turn, as fast as `generate` does it, while Podman and dockerd resolve
    erdma_0 again and again: every run must get one complete spec or the other."""
    kit = require("podman", "docker")
    specs = []
    for name in ("default", "uverbs-swapped"):
        fakehost.build(tmp_path / name, name)
        specs.append(cdi.build_spec(scan(tmp_path / name)))
    stop = threading.Event()
    writes = [0]

    def rewrite(spec_dir: Path) -> None:
        while not stop.is_set():
            cdi.write_spec(specs[writes[0] % 2], spec_dir)  # what `erdma cdi generate` calls
            writes[0] += 1
            time.sleep(0.002)

    runs: list[Probe] = []
    with own_cdi_dir(kit) as spec_dir:
        _generate(kit, tmp_path / "default", spec_dir)
        (tmp_path / "podman-cdi").mkdir()
        writers = [
            threading.Thread(target=rewrite, args=(d,), daemon=True)
            for d in (spec_dir, tmp_path / "podman-cdi")
        ]
        for writer in writers:
            writer.start()
        try:
            runs.append(_until_resolved(lambda: _docker(kit, "aliyun.com/erdma=erdma_0", "ls")))
            podman_cdi = tmp_path / "podman-cdi"
            for _ in range(6):
                runs.append(
                    _probe_run(lambda: _docker(kit, "aliyun.com/erdma=erdma_0", probe_script()))
                )
                runs.append(
                    _probe_run(
                        lambda: _podman(kit, podman_cdi, "aliyun.com/erdma=erdma_0", probe_script())
                    )
                )
        finally:
            stop.set()
            for writer in writers:
                writer.join()
    assert writes[0] > 100, "the writer must really have run during the container starts"
    for probe in runs[1:]:
        assert probe.infiniband() in (
            {UVERBS0: (231, 192), RDMA_CM: (10, 58)},
            {UVERBS1: (231, 193), RDMA_CM: (10, 58)},
        ), probe.raw


def test_a_temporary_file_left_by_a_crash_is_ignored_by_engines(tmp_path: Path):
    kit = require("podman")
    fakehost.build(tmp_path / "host", "default")
    _generate(kit, tmp_path / "host", tmp_path / "cdi")
    # the name write_spec gives its temporary file, holding garbage (a writer killed midway)
    (tmp_path / "cdi/.aliyun.com-erdma.x1y2z3.tmp").write_text("cdiVersion: [\n  broken")
    probe = _probe(_podman(kit, tmp_path / "cdi", "aliyun.com/erdma=erdma_0", probe_script()))
    assert probe.infiniband() == {UVERBS0: (231, 192), RDMA_CM: (10, 58)}
