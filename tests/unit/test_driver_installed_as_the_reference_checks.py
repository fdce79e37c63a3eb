"""The driver counts as installed only when the reference's checks pass: `modinfo erdma` and
the Alibaba driver's tools (`/bin/eadm`). A kernel's own erdma (no `compat_mode`) therefore does
not stop the installer, and compat/ofed then take effect; an install that ran unpinned says
which value pins it."""

from __future__ import annotations

from erdma.host.driver import DriverMode, switch_mode
from erdma.host.installer import EADM
from tests.unit.installer_rig import TARBALL, Rig, compat_param, install


def upstream_loaded(rig: Rig) -> None:
    """The kernel's own erdma, loaded: no compat_mode parameter, no Alibaba tools."""
    rig.node.kmod.installed.add("erdma")
    rig.node.kmod.upstream = True
    rig.host.load_module("erdma")
    (rig.host.sys / "module/erdma/parameters/compat_mode").unlink(missing_ok=True)


async def test_a_kernels_own_erdma_does_not_stop_compat_from_taking_effect(rig):
    rig.publish_installer()
    upstream_loaded(rig)
    _, done = await install(rig, DriverMode.COMPAT)
    assert rig.record.exists(), "the installer did not run"
    assert compat_param(rig.host) == "Y"
    assert done.installed is not None
    assert ("rmmod", "erdma") in rig.node.calls


async def test_default_mode_keeps_the_kernels_erdma_loaded_after_installing(rig):
    rig.publish_installer()
    upstream_loaded(rig)
    _, done = await install(rig, DriverMode.DEFAULT)
    assert rig.record.exists()
    assert ("rmmod", "erdma") not in rig.node.calls
    assert any("needs no reload" in action for action in done.actions)


async def test_a_module_without_the_alibaba_tools_is_installed_over(rig):
    rig.publish_installer()
    rig.node.kmod.installed.add("erdma")  # modinfo erdma passes
    await install(rig, DriverMode.DEFAULT)
    assert ("test", "-e", EADM) in rig.node.calls
    assert rig.record.exists(), "modinfo alone made the node count as installed"
    assert compat_param(rig.host) == "N"


async def test_the_module_and_the_tools_together_install_nothing(rig):
    rig.node.kmod.installed.add("erdma")
    rig.node.tools = True
    _, done = await install(rig, DriverMode.COMPAT)
    assert done.installed is None and not rig.node.ran("curl")
    assert compat_param(rig.host) == "Y"


async def test_container_optimised_linux_needs_the_module_only(rig):
    rig.node.release = "5.10.134-16.3.lifsea8.x86_64"
    rig.node.kmod.installed.add("erdma")
    _, done = await install(rig, DriverMode.DEFAULT)
    assert done.installed is None and not rig.node.ran("yum")


async def test_without_an_installer_the_kernels_erdma_is_kept(rig):
    upstream_loaded(rig)
    done = await switch_mode(rig.node, DriverMode.COMPAT, rig.host.root, None)
    assert done.actions == ("kept the loaded upstream erdma driver",)
    assert not rig.node.ran("rmmod")


async def test_an_unpinned_download_names_the_value_that_pins_it(rig):
    digest = rig.publish_installer()
    url, done = await install(rig, DriverMode.DEFAULT)
    assert done.installed is not None
    said = done.installed.unpinned
    assert f"driverInstaller.installerSha256={digest}" in said
    assert "agent.driverInstaller.installerSha256" in said  # the Helm value
    assert f"curl -fsSL {url}/{TARBALL} | sha256sum" in said


async def test_a_pinned_download_is_not_reported_as_unpinned(rig):
    digest = rig.publish_installer()
    _, done = await install(rig, DriverMode.DEFAULT, installer_sha256=digest)
    assert done.installed is not None and done.installed.unpinned == ""
