"""Installing a missing eRDMA driver: the reference's installer, downloaded from a mirror.

The downloads, checksums, archive and installer script are real (a local HTTP mirror, the
machine's curl, sha256sum and tar, a shell script standing in for `install.sh`); kmod, the
package manager and `uname` are the fixture host's, so a test sees both the commands a node
would run and that the module loads once the installer has run.
"""

from __future__ import annotations

import asyncio
import io
import tarfile
from pathlib import Path

import pytest

from erdma.host.driver import DriverInstallFailed, DriverMissing, DriverMode, switch_mode
from erdma.host.installer import (
    CGROUP_ESCAPE,
    CommandInstaller,
    ReferenceInstaller,
)
from erdma.host.run import RecordingRunner, Result, Runner
from erdma.sim.fakecmds import KERNEL_RELEASE
from tests.unit.installer_rig import TARBALL, compat_param, install


async def test_a_missing_driver_is_downloaded_built_and_loaded(rig):
    digest = rig.publish_installer()
    url, done = await install(rig, DriverMode.DEFAULT)
    assert compat_param(rig.host) == "N"
    assert rig.record.read_text().splitlines() == ["ERDMA_CM_NO_BOUND_IF=1", "args: --batch"]
    assert done.installed is not None
    assert f"{url}/{TARBALL} (sha256 {digest})" in done.installed.summary
    assert done.installed.output[-1] == "erdma installed"
    assert done.actions[0].startswith("installed erdma: ran erdma_installer-1.5.9.tar.gz")
    packages = ("debhelper", "autotools-dev", "dkms", "libnl-3-dev", "libnl-route-3-dev", "cmake")
    assert rig.node.ran("apt-get") == [
        ("apt-get", "update"),
        ("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", *packages),
    ]


async def test_the_sha256_is_logged_even_when_nothing_pins_it(rig, caplog):
    digest = rig.publish_installer()
    caplog.set_level("INFO", logger="erdma.host.installer")
    await install(rig, DriverMode.DEFAULT)
    logged = [r for r in caplog.records if r.getMessage() == "downloaded the eRDMA installer"]
    assert [(r.sha256, r.pinned) for r in logged] == [(digest, None)]


async def test_compat_forces_mad_and_yum_nodes_get_kernel_headers(rig):
    rig.publish_installer()
    rig.node.package_manager = "yum"
    await install(rig, DriverMode.COMPAT)
    assert compat_param(rig.host) == "Y"
    assert "ERDMA_FORCE_MAD_ENABLE=1" in rig.record.read_text().splitlines()
    assert rig.node.ran("yum") == [
        ("yum", "install", "-y", f"kernel-devel-{KERNEL_RELEASE}", "gcc-c++", "dkms", "cmake")
    ]


async def test_ofed_runs_the_gpu_environment_setup_instead(rig):
    script = f'echo "args: $*" > {rig.record}\ntouch {rig.marker}\n'.encode()
    digest = rig.publish("env_setup.sh", script)
    _, done = await install(rig, DriverMode.OFED, env_setup_sha256=digest.upper())
    assert rig.record.read_text() == "args: --egs\n"
    assert not rig.node.ran("apt-get") and not rig.node.ran("tar")
    assert compat_param(rig.host) == "Y"
    assert done.installed is not None and "env_setup.sh" in done.installed.summary


async def test_a_pinned_checksum_that_matches_runs(rig):
    digest = rig.publish_installer()
    await install(rig, DriverMode.DEFAULT, installer_sha256=digest)
    assert rig.marker.exists()


async def test_a_checksum_mismatch_runs_nothing_and_says_both_sums(rig):
    digest = rig.publish_installer()
    pin = "0" * 64
    with pytest.raises(DriverInstallFailed) as err:
        await install(rig, DriverMode.DEFAULT, installer_sha256=pin)
    assert f"has sha256 {digest}, but driverInstaller.installerSha256 pins {pin}" in str(err.value)
    assert "nothing from it was run" in err.value.problem
    assert not rig.marker.exists() and not rig.record.exists()
    assert not rig.node.ran("tar") and not rig.node.ran("apt-get")
    assert not (rig.work / TARBALL).exists()


async def test_a_failed_download_names_the_url_and_the_mirror_value(rig):
    with pytest.raises(DriverInstallFailed) as err:  # nothing published: the mirror says 404
        await install(rig, DriverMode.DEFAULT)
    assert f"/erdma/{TARBALL}" in err.value.problem and "404" in err.value.problem
    assert "driverInstaller.mirror" in err.value.remedy
    assert "driverInstaller.version" in err.value.remedy
    assert not rig.marker.exists()


async def test_an_unreachable_mirror_is_a_download_failure(rig):
    settings = rig.settings("http://127.0.0.1:9/erdma")  # discard port: connection refused
    with pytest.raises(DriverInstallFailed) as err:
        await switch_mode(rig.node, DriverMode.DEFAULT, rig.host.root, ReferenceInstaller(settings))
    assert "downloading the eRDMA installer failed" in err.value.problem
    assert "exited 7" in err.value.problem  # curl: failed to connect


async def test_a_node_without_curl_falls_back_to_wget(rig):
    rig.publish_installer()
    rig.node.refuse["curl"] = Result(("curl",), 127, "", "curl: command not found")
    await install(rig, DriverMode.DEFAULT)
    assert rig.node.ran("wget") and rig.marker.exists()


async def test_a_node_without_curl_or_wget_says_so(rig):
    missing = Result(("x",), 127, "", "command not found")
    rig.node.refuse.update(curl=missing, wget=missing)
    with pytest.raises(DriverInstallFailed, match="neither curl nor wget is on the node"):
        await install(rig, DriverMode.DEFAULT)


async def test_an_archive_without_the_installer_is_refused(rig):
    rig.publish(TARBALL, _empty_tarball())
    with pytest.raises(DriverInstallFailed) as err:
        await install(rig, DriverMode.DEFAULT)
    assert "holds no erdma_installer/install.sh" in err.value.problem
    assert not rig.node.ran("apt-get")


def _empty_tarball() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz"):
        pass
    return out.getvalue()


async def test_an_installer_that_fails_reports_its_output(rig):
    rig.publish_installer(body='echo "dkms: kernel-devel for this kernel not found" >&2; exit 3')
    with pytest.raises(DriverInstallFailed) as err:
        await install(rig, DriverMode.DEFAULT)
    assert f"failed at {TARBALL}" in err.value.problem and "exited 3" in err.value.problem
    assert "building erdma for" in err.value.problem  # the output's tail, not only the last line
    assert "kernel-devel for this kernel not found" in err.value.problem
    assert not rig.host.module_loaded("erdma")


async def test_an_installer_that_runs_but_installs_nothing_is_named(rig):
    rig.publish_installer(body="exit 0")  # exits before touching the marker
    with pytest.raises(DriverMissing) as err:
        await install(rig, DriverMode.DEFAULT)
    assert "driverInstaller ran but did not install it" in err.value.remedy


async def test_a_node_without_a_package_manager_is_told_to_use_an_image(rig):
    rig.publish_installer()
    rig.node.package_manager = None
    with pytest.raises(DriverInstallFailed) as err:
        await install(rig, DriverMode.DEFAULT)
    assert "no package manager (yum, dnf or apt-get)" in err.value.problem
    assert "driverInstaller.enabled=false" in err.value.remedy


async def test_the_install_times_out_and_leaves_no_build_running(rig):
    rig.publish_installer(body=f"sleep 60 & echo $! > {rig.record}.pid; wait")
    with pytest.raises(DriverInstallFailed) as err:
        await install(rig, DriverMode.DEFAULT, timeout=3.0)
    assert "timed out after 3s" in err.value.problem
    assert "driverInstaller.timeoutSeconds" in err.value.remedy
    pid = int(Path(f"{rig.record}.pid").read_text())
    await asyncio.sleep(0.2)
    assert process_state(pid) in (None, "Z")  # the installer's child was killed with it


def process_state(pid: int) -> str | None:
    """`R`, `S`, ... from /proc; `Z` for a killed child not yet reaped; None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


async def test_container_optimised_linux_installs_the_module_package(rig):
    rig.node.release = "5.10.134-16.3.lifsea8.x86_64"
    rig.node.kmod.installed.add("erdma")  # what the package provides
    installer = ReferenceInstaller(rig.settings("http://unused"))
    report = await installer.install(rig.node, DriverMode.DEFAULT)
    assert rig.node.ran("yum") == [("yum", "install", "-y", f"kernel-modules-{rig.node.release}")]
    assert not rig.node.ran("curl")
    assert "kernel-modules-5.10.134-16.3.lifsea8.x86_64" in report.summary


async def test_in_the_host_namespaces_the_build_leaves_the_agent_cgroup():
    digest = "ab" * 32
    answers = {
        "uname": Result(("uname",), 0, "5.10.0\n"),
        "sha256sum": Result(("sha256sum",), 0, f"{digest}  /var/tmp/x\n"),
        "sh": Result(("sh",), 0, "yum\n"),
    }
    runner = RecordingRunner(handlers=[lambda a: answers.get(a[0])], host_namespace=True)
    await ReferenceInstaller().install(runner, DriverMode.COMPAT)
    *_, last = runner.calls
    assert last[:10] == ("nsenter", "-t", "1", "-m", "--", "nsenter", "-t", "1", "-C", "--")
    assert last[10:12] == ("sh", "-c")
    assert last[12] == (
        f"{CGROUP_ESCAPE}; cd /var/tmp/erdma-driver-install/erdma_installer && "
        "exec env ERDMA_CM_NO_BOUND_IF=1 ERDMA_FORCE_MAD_ENABLE=1 ./install.sh --batch"
    )
    curl = next(c for c in runner.calls if "curl" in c)
    assert curl[-1] == f"http://mirrors.cloud.aliyuncs.com/erdma/{TARBALL}"


async def test_a_custom_install_command_replaces_the_download(rig):
    command = f"touch {rig.marker}; echo done"
    done = await switch_mode(
        rig.node, DriverMode.DEFAULT, rig.host.root, CommandInstaller(command, 30.0)
    )
    assert done.installed is not None and done.installed.output == ("done",)
    assert not rig.node.ran("curl") and rig.host.module_loaded("erdma")


async def test_runner_timeout_is_per_call():
    result = await Runner(timeout=30.0).run(["sleep", "5"], timeout=0.2)
    assert (result.returncode, result.stderr) == (124, "timed out after 0.2s")
