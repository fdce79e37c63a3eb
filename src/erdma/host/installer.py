"""Installing the eRDMA kernel driver on a node that lacks it, as Alibaba Cloud's images do.

- `default`/`compat`: `erdma_installer-<version>.tar.gz` from the eRDMA mirror, the kernel
  headers and build tools from the node's package manager, then `install.sh --batch` (DKMS
  builds the module for the running kernel); `compat` adds `ERDMA_FORCE_MAD_ENABLE=1`.
- `ofed` (GPU nodes): the mirror's `env_setup.sh --egs`, the OFED-based stack NCCL uses.
- Container-optimised Alibaba Cloud Linux (`lifsea` kernels) ships the module as the package
  `kernel-modules-<release>`.

Every step runs through the `Runner`, so with `hostNamespace` it runs in the host's mount
namespace with the host's curl, tar and package manager, and nothing from the agent image ends
up on the host. The downloaded file's sha256 is always logged and, when a value pins it,
checked before anything from it runs. The whole install shares one deadline, and a failure
names the step, what it printed and what a person can do.
"""

from __future__ import annotations

import logging
import re
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass

from erdma.host.driver import (
    DriverInstallFailed,
    DriverMode,
    InstallReport,
)
from erdma.host.run import Result, Runner

log = logging.getLogger(__name__)

DEFAULT_MIRROR = "http://mirrors.cloud.aliyuncs.com/erdma"
DEFAULT_VERSION = "1.5.9"  # the reference agent's --erdma-installer-version default
WORKDIR = "/var/tmp/erdma-driver-install"
KEY = "driverInstaller"
EADM = "/bin/eadm"  # installed with the Alibaba eRDMA driver (its admin tool)
TAIL_LINES = 15
YUM_PACKAGES = ("gcc-c++", "dkms", "cmake")  # plus kernel-devel-<release>
APT_PACKAGES = ("debhelper", "autotools-dev", "dkms", "libnl-3-dev", "libnl-route-3-dev", "cmake")
FIND_PACKAGE_MANAGER = (
    "for m in yum dnf apt-get; do command -v $m >/dev/null 2>&1 && { echo $m; exit 0; }; done; "
    "exit 1"
)
# The build runs for minutes and needs more memory than the agent's limit: move its shell out of
# the agent's cgroup (v1: the root cpu and memory groups; v2: a leaf of its own), best effort.
CGROUP_ESCAPE = (
    "{ if [ -d /sys/fs/cgroup/cpu ]; then echo $$ > /sys/fs/cgroup/cpu/tasks; "
    "echo $$ > /sys/fs/cgroup/memory/tasks; else mkdir -p /sys/fs/cgroup/erdma-installer && "
    "echo $$ > /sys/fs/cgroup/erdma-installer/cgroup.procs; fi; } 2>/dev/null || true"
)
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class InstallerSettings:
    """Where the installer comes from, what it must hash to, and how long it may take."""

    version: str = DEFAULT_VERSION
    mirror: str = DEFAULT_MIRROR
    installer_sha256: str = ""  # erdma_installer-<version>.tar.gz; empty: logged, not checked
    env_setup_sha256: str = ""  # env_setup.sh (ofed)
    timeout: float = 1800.0
    workdir: str = WORKDIR


class _Deadline:
    """One time budget for every step of an install."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = time.monotonic()

    def left(self, step: str) -> float:
        left = self.seconds - self.elapsed()
        if left <= 0:
            raise _timed_out(step, self.seconds)
        return left

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def _timed_out(step: str, seconds: float) -> DriverInstallFailed:
    return DriverInstallFailed(
        f"installing the eRDMA driver timed out after {seconds:g}s ({step})",
        f"raise {KEY}.timeoutSeconds if the node is slow to build, or install the driver in the "
        f"node image and set {KEY}.enabled=false",
    )


def tail(result: Result, lines: int = TAIL_LINES) -> tuple[str, ...]:
    """The last lines a command printed (stdout, then stderr), for logs and Events."""
    said = (result.stdout + "\n" + result.stderr).strip().splitlines()
    return tuple(line.rstrip() for line in said[-lines:] if line.strip())


class ReferenceInstaller:
    """The eRDMA installer from Alibaba Cloud's mirror, run the way the reference agent runs it."""

    key = KEY

    def __init__(self, settings: InstallerSettings | None = None) -> None:
        self.settings = settings or InstallerSettings()

    async def missing(self, runner: Runner) -> Result | None:
        """The reference's check besides `modinfo erdma`: the Alibaba driver's tools
        (`/bin/eadm`), so a kernel's own erdma module does not pass for the driver whose
        `compat_mode` the compat and ofed modes need. Container-optimised kernels (`lifsea`)
        ship the module alone, as the reference expects there."""
        release = await runner.run(["uname", "-r"])
        if "lifsea" in release.stdout:
            return None
        tools = await runner.run(["test", "-e", EADM])
        return None if tools.ok else Result(tools.argv, tools.returncode, "", f"{EADM} is absent")

    async def install(self, runner: Runner, mode: DriverMode) -> InstallReport:
        deadline = _Deadline(self.settings.timeout)
        release = (await self._step(runner, deadline, "uname -r", ["uname", "-r"])).stdout.strip()
        if "lifsea" in release:
            package = f"kernel-modules-{release}"
            done = await self._step(runner, deadline, "yum", ["yum", "install", "-y", package])
            return InstallReport(f"installed {package} in {deadline.elapsed():.0f}s", tail(done))
        work = self.settings.workdir
        await self._step(runner, deadline, "work directory", ["rm", "-rf", work])
        await self._step(runner, deadline, "work directory", ["mkdir", "-p", work])
        if mode is DriverMode.OFED:
            name, pin = "env_setup.sh", (self.settings.env_setup_sha256, f"{KEY}.envSetupSha256")
            digest = await self._fetch(runner, deadline, name, *pin)
            script = f"cd {shlex.quote(work)} && exec bash env_setup.sh --egs"
        else:
            name = f"erdma_installer-{self.settings.version}.tar.gz"
            pin = (self.settings.installer_sha256, f"{KEY}.installerSha256")
            digest = await self._fetch(runner, deadline, name, *pin)
            await self._unpack(runner, deadline, name)
            await self._build_dependencies(runner, deadline, release)
            flags = "ERDMA_CM_NO_BOUND_IF=1" + (
                " ERDMA_FORCE_MAD_ENABLE=1" if mode is DriverMode.COMPAT else ""
            )
            installer_dir = shlex.quote(f"{work}/erdma_installer")
            script = f"cd {installer_dir} && exec env {flags} ./install.sh --batch"
        done = await self._step(runner, deadline, name, self._escaped(runner, script))
        source = f"{self.settings.mirror}/{name}"
        summary = f"ran {name} from {source} (sha256 {digest}) in {deadline.elapsed():.0f}s"
        return InstallReport(
            summary, tail(done), "" if pin[0] else unpinned(source, digest, pin[1])
        )

    async def _step(
        self, runner: Runner, deadline: _Deadline, step: str, argv: Sequence[str]
    ) -> Result:
        """One command within the deadline; its failure is the install's, with its output."""
        result = await runner.run(argv, timeout=deadline.left(step))
        if result.returncode == 124 and deadline.elapsed() >= self.settings.timeout - 0.5:
            raise _timed_out(step, self.settings.timeout)
        if not result.ok:
            raise DriverInstallFailed(
                f"installing the eRDMA driver failed at {step}: {result.describe()}"
                + "".join(f"\n  {line}" for line in tail(result)),
                f"fix what the output says on the node, or install the driver in the node image "
                f"and set {KEY}.enabled=false",
            )
        log.info("driver install step done", extra={"step": step, "output": list(tail(result))})
        return result

    def _escaped(self, runner: Runner, script: str) -> list[str]:
        """The installer's shell, out of the agent's cgroup when running in the host's namespaces
        (`nsenter -C` enters the host's cgroup namespace, where the host's groups are visible)."""
        if not runner.host_namespace:
            return ["sh", "-c", script]
        return ["nsenter", "-t", "1", "-C", "--", "sh", "-c", f"{CGROUP_ESCAPE}; {script}"]

    async def _fetch(
        self, runner: Runner, deadline: _Deadline, name: str, pin: str, pin_key: str
    ) -> str:
        """Download `name` with the host's curl (or wget); return its sha256, checked if pinned."""
        url, dest = f"{self.settings.mirror}/{name}", f"{self.settings.workdir}/{name}"
        curl = ["curl", "-fsSL", "--retry", "2", "--connect-timeout", "10", "-o", dest, url]
        got = await runner.run(curl, timeout=deadline.left("download"))
        if got.returncode == 127:
            wget = ["wget", "-q", "-T", "10", "-t", "3", "-O", dest, url]
            got = await runner.run(wget, timeout=deadline.left("download"))
        if got.returncode == 127:
            raise DriverInstallFailed(
                f"neither curl nor wget is on the node to download {url}",
                f"install curl on the node, or install the driver in the node image and set "
                f"{KEY}.enabled=false",
            )
        if not got.ok:
            raise DriverInstallFailed(
                f"downloading the eRDMA installer failed: {got.describe()}",
                f"check that the node reaches {self.settings.mirror} (Alibaba Cloud's "
                f"VPC-internal mirror, plain HTTP) or set {KEY}.mirror to a mirror it reaches, "
                f"and that {name} exists there ({KEY}.version)",
            )
        sums = await self._step(runner, deadline, "sha256sum", ["sha256sum", dest])
        digest = (sums.stdout.split() or [""])[0].lower()
        if not _SHA256.fullmatch(digest):
            raise DriverInstallFailed(
                f"sha256sum printed no checksum for {dest}: {sums.stdout.strip()!r}",
                "install coreutils on the node",
            )
        pinned = pin_key if pin else None
        log.info(
            "downloaded the eRDMA installer", extra={"url": url, "sha256": digest, "pinned": pinned}
        )
        if pin and digest != pin.lower():
            await runner.run(["rm", "-f", dest])
            raise DriverInstallFailed(
                f"{name} from {url} has sha256 {digest}, but {pin_key} pins {pin.lower()}; "
                "nothing from it was run",
                f"check the file the mirror serves now and update {pin_key}, or set {KEY}.mirror "
                "to a mirror you trust",
            )
        return digest

    async def _unpack(self, runner: Runner, deadline: _Deadline, name: str) -> None:
        work = self.settings.workdir
        await self._step(runner, deadline, "tar", ["tar", "-xzf", f"{work}/{name}", "-C", work])
        script = f"{work}/erdma_installer/install.sh"
        if not (await runner.run(["test", "-f", script])).ok:
            raise DriverInstallFailed(
                f"{name} holds no erdma_installer/install.sh",
                f"the mirror served something other than the eRDMA installer: check {KEY}.mirror "
                f"and {KEY}.version",
            )

    async def _build_dependencies(self, runner: Runner, deadline: _Deadline, release: str) -> None:
        """Kernel headers and build tools for DKMS, from yum, dnf or apt-get (in that order)."""
        found = await runner.run(["sh", "-c", FIND_PACKAGE_MANAGER])
        manager = found.stdout.strip() if found.ok else ""
        if manager in ("yum", "dnf"):
            packages = (f"kernel-devel-{release}", *YUM_PACKAGES)
            await self._step(runner, deadline, manager, [manager, "install", "-y", *packages])
        elif manager == "apt-get":
            await self._step(runner, deadline, "apt-get update", ["apt-get", "update"])
            apt = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y"]
            await self._step(runner, deadline, "apt-get install", [*apt, *APT_PACKAGES])
        else:
            raise DriverInstallFailed(
                "no package manager (yum, dnf or apt-get) on the node for the installer's build "
                "dependencies",
                f"install the eRDMA driver in the node image and set {KEY}.enabled=false",
            )


def unpinned(source: str, digest: str, pin_key: str) -> str:
    """What a person reads when an installer ran without a pinned checksum: the value to set
    and how to compute it from a copy they reviewed."""
    return (
        f"{source} ran without a checksum check (sha256 {digest}): set {pin_key}={digest} "
        f"(Helm: agent.{pin_key}) once you trust this file, computed with `curl -fsSL {source} "
        "| sha256sum`, so a changed file is never run"
    )


class CommandInstaller:
    """The user's own `driverInstallCommand`, which replaces the reference installer."""

    key = "driverInstallCommand"

    def __init__(self, command: str, timeout: float) -> None:
        self.command = command
        self.timeout = timeout

    async def missing(self, runner: Runner) -> Result | None:
        """`modinfo erdma` is the whole check: the command installs whatever driver it installs."""
        return None

    async def install(self, runner: Runner, mode: DriverMode) -> InstallReport:
        started = time.monotonic()
        done = await runner.run(["sh", "-c", self.command], timeout=self.timeout)
        if not done.ok:
            raise DriverInstallFailed(
                f"the erdma kernel module is not installed and {self.key} failed: "
                f"{done.describe()}",
                f"fix {self.key} or install the eRDMA driver on the node by hand",
            )
        elapsed = time.monotonic() - started
        return InstallReport(f"ran {self.key} in {elapsed:.0f}s", tail(done))
