"""A fixture node for driver-install tests: a fake host whose erdma is missing, a local mirror
directory, and the InstallerNode that runs the real download, checksum and installer script."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from erdma.host.driver import DriverMode, Prepared, switch_mode
from erdma.host.installer import InstallerSettings, ReferenceInstaller
from erdma.sim import fakehost
from erdma.sim.fakecmds import KmodCommands
from tests.fakes.installer_node import InstallerNode, installer_tarball, mirror, sha256

REPO_ROOT = Path(__file__).resolve().parents[2]

TARBALL = "erdma_installer-1.5.9.tar.gz"


@dataclass
class Rig:
    root: Path  # everything below lives here
    host: fakehost.FakeHost
    node: InstallerNode
    files: Path  # what the mirror serves, under /erdma
    record: Path  # what install.sh wrote about how it was run
    marker: Path
    work: Path

    def publish(self, name: str, data: bytes) -> str:
        (self.files / name).write_bytes(data)
        return sha256(data)

    def publish_installer(self, body: str = "") -> str:
        return self.publish(TARBALL, installer_tarball(self.record, self.marker, body))

    def settings(self, url: str, **changes: Any) -> InstallerSettings:
        return InstallerSettings(mirror=url, workdir=str(self.work), **changes)


def make_rig(tmp_path: Path) -> Rig:
    """A node without erdma (and without the Alibaba driver's tools); `rig` in conftest.py."""
    fakehost.build(tmp_path / "host", "driver-not-loaded")
    (tmp_path / "mirror" / "erdma").mkdir(parents=True)
    return open_rig(tmp_path)


def open_rig(tmp_path: Path) -> Rig:
    """The rig `make_rig` built under ``tmp_path``, as another process sees it."""
    host = fakehost.FakeHost(tmp_path / "host", fakehost.variant("driver-not-loaded"))
    marker = tmp_path / "module-installed"
    node = InstallerNode(kmod=KmodCommands(host, installed={"smc"}), marker=marker)
    files = tmp_path / "mirror" / "erdma"
    return Rig(tmp_path, host, node, files, tmp_path / "record", marker, tmp_path / "work")


def compat_param(host: fakehost.FakeHost) -> str:
    return (host.sys / "module/erdma/parameters/compat_mode").read_text().strip()


async def install(rig: Rig, mode: DriverMode, **changes: object) -> tuple[str, Prepared]:
    with mirror(rig.files.parent) as url:
        installer = ReferenceInstaller(rig.settings(url, **changes))
        return url, await switch_mode(rig.node, mode, rig.host.root, installer)
