"""A node for driver-install tests: real commands, except what would change this machine.

curl, sha256sum, tar, sh and the installer script itself really run (against a local mirror
served over HTTP), so the tests check what the agent actually does with a download. Three
things are answered instead: kmod (the fixture host's `KmodCommands`, which sees the module
once the installer script has written its marker), the package managers (recorded, so the
tests see which packages a node would install) and `uname -r` (the fixture host's kernel).
With `workdir`, the installer's work directory on the node is that test directory instead.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from erdma.host.installer import EADM, WORKDIR
from erdma.host.run import Result, Runner
from erdma.sim.fakecmds import KERNEL_RELEASE, KmodCommands

PACKAGE_MANAGERS = {"yum", "dnf", "apt-get"}

#: an installer script that records how it was run and then "installs" the module
INSTALL_SH = """#!/bin/sh
echo "building erdma for $(uname -r)"
{{ env | grep '^ERDMA_' | sort; echo "args: $*"; }} > {record}
{body}
touch {marker}
echo "erdma installed"
"""


@dataclass
class InstallerNode(Runner):
    """Runs commands for real in `workdir`, answering kmod, package managers and uname."""

    kmod: KmodCommands = field(kw_only=True)
    marker: Path = field(kw_only=True)  # the installer script touches it; then erdma is there
    release: str = KERNEL_RELEASE
    package_manager: str | None = "apt-get"  # None: none on the node
    refuse: dict[str, Result] = field(default_factory=dict)  # argv[0] -> its answer
    calls: list[tuple[str, ...]] = field(default_factory=list)
    workdir: Path | None = None
    tools: bool = False  # /bin/eadm is on the node before any install
    host_namespace: bool = False
    timeout: float = 30.0

    async def run(
        self, argv: Sequence[str], input_text: str | None = None, timeout: float | None = None
    ) -> Result:
        if self.workdir is not None:
            argv = [a.replace(WORKDIR, str(self.workdir)) for a in argv]
        argv = tuple(argv)
        self.calls.append(argv)
        if self.marker.exists():  # DKMS's build takes precedence over a kernel's own erdma
            self.kmod.installed.add("erdma")
            self.kmod.upstream = False
        if argv[0] in self.refuse:
            return self.refuse[argv[0]]
        answer = self.kmod(argv) or self._answer(argv)
        if answer is not None:
            return answer
        return await super().run(argv, input_text, timeout)

    def _answer(self, argv: tuple[str, ...]) -> Result | None:
        if argv == ("test", "-e", EADM):  # the Alibaba driver's tools come with its install
            return Result(argv, 0 if self.marker.exists() or self.tools else 1)
        if argv == ("uname", "-r"):
            return Result(argv, 0, self.release + "\n")
        if argv[:2] == ("sh", "-c") and "command -v" in argv[2]:
            if self.package_manager is None:
                return Result(argv, 1)
            return Result(argv, 0, self.package_manager + "\n")
        if PACKAGE_MANAGERS & set(argv[:3]):
            return Result(argv, 0, "Complete!\n")
        return None

    def ran(self, command: str) -> list[tuple[str, ...]]:
        """The calls whose argv[0] (or the program after `env VAR=...`) is `command`."""
        return [c for c in self.calls if command in c[:3]]


def installer_tarball(record: Path, marker: Path, body: str = "") -> bytes:
    """erdma_installer-<v>.tar.gz as the mirror serves it: `erdma_installer/install.sh`."""
    script = INSTALL_SH.format(record=record, marker=marker, body=body).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        info = tarfile.TarInfo("erdma_installer/install.sh")
        info.size, info.mode = len(script), 0o755
        tar.addfile(info, io.BytesIO(script))
    return out.getvalue()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@contextmanager
def mirror(directory: Path) -> Iterator[str]:
    """An HTTP mirror serving `directory`; yields its base URL."""
    handler = partial(_QuietHandler, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/erdma"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass
