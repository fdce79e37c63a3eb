"""The erdma kernel driver: which personality to run, and how to get the node into it.

The out-of-tree erdma module has one mode switch, the load-time parameter `compat_mode`
(`/sys/module/erdma/parameters/compat_mode`, `Y` or `N`). It cannot change while the module is
loaded, so switching means `rmmod erdma` and loading again, which the kernel refuses while any
process or module holds the device. The upstream module has no such parameter: its personality
comes from the device itself, and reloading it cannot change anything.

Every command goes through a `Runner` (in the host mount namespace when the agent runs in a
container, so the host's kmod and module tree are used) and every failure carries a remedy a
person can act on, because this runs unattended on every node.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from erdma.host.install_lock import install_lock
from erdma.host.model import Gpu
from erdma.host.run import Result, Runner
from erdma.host.sysfs import HostRoot, read_int, read_text

log = logging.getLogger(__name__)

MODULE = "erdma"
PREFER_DRIVER_KEY = "preferDriver"


class DriverMode(enum.StrEnum):
    """The three personalities users choose with `preferDriver`."""

    DEFAULT = "default"  # compat_mode=N: iWARP, rdma_cm, SMC-R
    COMPAT = "compat"  # compat_mode=Y: RoCE-like (GID table, OOB connection setup), SMC-R
    OFED = "ofed"  # compat_mode=Y for GPU nodes: NCCL, GPUDirect; no SMC (OFED's smc.ko)

    @classmethod
    def parse(cls, value: str, key: str = PREFER_DRIVER_KEY) -> DriverMode:
        """`value` as a mode; anything else is an error naming the key and the valid values."""
        try:
            return cls(value.strip().lower())
        except ValueError:
            valid = ", ".join(m.value for m in cls)
            raise ValueError(
                f"{key}={value!r} is not a driver mode; use one of {valid}, "
                "or leave it empty to choose automatically"
            ) from None

    @property
    def compat_mode(self) -> bool:
        """The `compat_mode` module parameter this mode loads erdma with."""
        return self is not DriverMode.DEFAULT

    @property
    def wants_smc(self) -> bool:
        """SMC-R is loaded except under `ofed`, where MLNX OFED's smc.ko breaks smc_pnet."""
        return self is not DriverMode.OFED

    @property
    def wants_peermem(self) -> bool:
        """GPUDirect RDMA needs nvidia_peermem in the RoCE-like modes (NCCL < 2.27)."""
        return self.compat_mode

    @classmethod
    def for_compat_mode(cls, compat: bool) -> DriverMode:
        """The mode to suggest for a loaded `compat_mode` (compat, not ofed, keeps SMC-R)."""
        return cls.COMPAT if compat else cls.DEFAULT


def yes_no(flag: bool) -> str:
    """A bool module parameter as the kernel prints and modprobe accepts it."""
    return "Y" if flag else "N"


@dataclass(frozen=True)
class LoadedDriver:
    """The erdma module as sysfs shows it right now."""

    loaded: bool
    compat_mode: bool | None  # None: not loaded, or the upstream driver (no parameter)
    refcount: int | None

    @property
    def upstream(self) -> bool:
        return self.loaded and self.compat_mode is None


def loaded_driver(root: str | os.PathLike[str] = "/") -> LoadedDriver:
    """Read `/sys/module/erdma` (presence, `parameters/compat_mode`, `refcnt`)."""
    module = HostRoot(root).sys / "module" / MODULE
    if not module.is_dir():
        return LoadedDriver(loaded=False, compat_mode=None, refcount=None)
    compat = read_text(module / "parameters" / "compat_mode")
    return LoadedDriver(
        loaded=True,
        compat_mode=None if compat is None else compat.upper() in ("Y", "1"),
        refcount=read_int(module / "refcnt"),
    )


def choose_mode(prefer: str | None, gpus: Sequence[Gpu]) -> tuple[DriverMode, str]:
    """The mode to run and why: an explicit `preferDriver`, else `ofed` on GPU nodes.

    The reference ran `which nvidia-smi` on the host; the GPUs discovery already found (bound
    to the nvidia driver or listed in /proc/driver/nvidia/gpus) need no user-space tools.
    """
    if prefer is not None and prefer.strip():
        mode = DriverMode.parse(prefer)
        return mode, f"{PREFER_DRIVER_KEY}={mode.value}"
    if gpus:
        return DriverMode.OFED, f"automatic: {len(gpus)} NVIDIA GPU(s) found, NCCL needs ofed"
    return DriverMode.DEFAULT, "automatic: no NVIDIA GPU found"


class DriverError(Exception):
    """Preparing the driver failed; `remedy` says what a person can do about it."""

    def __init__(self, problem: str, remedy: str) -> None:
        super().__init__(f"{problem}; {remedy}")
        self.problem = problem
        self.remedy = remedy


class DriverMissing(DriverError):
    """The erdma module is not installed for the running kernel."""


class DriverInUse(DriverError):
    """`rmmod erdma` was refused because something still holds the module."""


class DriverInstallFailed(DriverMissing):
    """The module is missing and installing it failed; `problem` says at which step."""


@dataclass(frozen=True)
class InstallReport:
    """What an install did, for the agent log and the node's Event."""

    summary: str
    output: tuple[str, ...]  # the last lines the installer printed
    unpinned: str = ""  # a download ran unchecked: the value that pins it and how to compute it

    def message(self) -> str:
        last = "; ".join(self.output[-3:])
        return f"{self.summary}; last output: {last}" if last else self.summary


class DriverInstaller(Protocol):
    """Installs the erdma module on a node that lacks it (erdma.host.installer)."""

    key: str  # the setting that chose it, named in errors

    async def missing(self, runner: Runner) -> Result | None:
        """The failed check that shows the driver is not installed as this installer installs
        it, or None when it is."""
        ...

    async def install(self, runner: Runner, mode: DriverMode) -> InstallReport:
        """Install for `mode`, or raise DriverInstallFailed."""
        ...


@dataclass(frozen=True)
class Prepared:
    """What `switch_mode` did: the commands' effects and best-effort notes, in order."""

    driver: LoadedDriver
    actions: tuple[str, ...]
    notes: tuple[str, ...]
    installed: InstallReport | None = None


async def switch_mode(
    runner: Runner,
    mode: DriverMode,
    root: str | os.PathLike[str] = "/",
    installer: DriverInstaller | None = None,
) -> Prepared:
    """Get erdma loaded in `mode`, plus the helper modules the mode uses.

    Sequence (each step only when needed): is the driver installed (`modinfo erdma`, and with
    an `installer` its own check too, e.g. the Alibaba driver's `/bin/eadm`), the `installer`
    when it is not, `rmmod erdma` when the loaded `compat_mode` differs, `modprobe erdma
    compat_mode=N|Y`; then `modprobe smc` (default, compat) and `nvidia_peermem` (compat, ofed),
    both best effort. Re-running on a prepared node runs no erdma command at all.

    A loaded upstream driver (a kernel's own erdma, which has no `compat_mode`) is kept when no
    installer is configured. With one, the Alibaba driver is installed beside it as the reference
    agent does, and `compat`/`ofed` reload erdma so the installed driver's RoCE-like personality
    takes effect (a built-in erdma cannot be unloaded: that is reported with its remedy).
    """
    state = loaded_driver(root)
    actions: list[str] = []
    notes: list[str] = []
    installed: InstallReport | None = None
    if state.loaded and state.compat_mode == mode.compat_mode:
        actions.append(f"erdma already loaded with compat_mode={yes_no(mode.compat_mode)}")
    elif state.upstream and installer is None:
        actions.append("kept the loaded upstream erdma driver")
    else:
        if not state.loaded or state.upstream:
            installed = await _ensure_installed(runner, mode, installer, root)
        if installed is not None:
            actions.append(f"installed erdma: {installed.summary}")
        if state.upstream and not mode.compat_mode:
            actions.append("kept the loaded upstream erdma driver (mode default needs no reload)")
        else:
            actions += await _reload(runner, mode, state, root)
    final = loaded_driver(root)
    if final.upstream:
        notes.append(
            "the upstream erdma driver has no compat_mode parameter: the device sets its "
            f"personality, so {PREFER_DRIVER_KEY} cannot change it"
        )
    if mode.wants_smc:
        notes.append(await load_optional(runner, root, "smc"))
    if mode.wants_peermem:
        notes.append(await load_optional(runner, root, "nvidia_peermem"))
    return Prepared(final, tuple(actions), tuple(notes), installed)


async def _ensure_installed(
    runner: Runner,
    mode: DriverMode,
    installer: DriverInstaller | None,
    root: str | os.PathLike[str],
) -> InstallReport | None:
    """Whether the driver is installed (`modinfo erdma`, then the installer's own check), and
    when it is not the installer, under the node's install lock, then the checks again."""
    result = await runner.run(["modinfo", MODULE])
    if result.returncode == 127:
        raise DriverError(
            f"cannot check for the erdma module: {result.describe()}",
            "install kmod (modinfo, modprobe, rmmod) on the node",
        )
    if installer is None:
        if result.ok:
            return None
        raise missing_error(result, None)
    missing = None if not result.ok else await installer.missing(runner)
    if result.ok and missing is None:
        return None
    async with install_lock(root) as lock:
        if lock.waited:  # the install this one waited for may have done the job
            result = await runner.run(["modinfo", MODULE])
            missing = result if not result.ok else await installer.missing(runner)
            if missing is None:
                return None
        why = {"installer": installer.key, "check": (missing or result).describe()}
        log.info("the eRDMA driver is not installed: installing it", extra=why)
        report = await installer.install(runner.keeping(lock.fd), mode)
    said = {"summary": report.summary, "output": list(report.output)}
    log.info("driver installer finished", extra=said)
    again = await runner.run(["modinfo", MODULE])
    if not again.ok:
        raise missing_error(again, installer)
    return report


async def _reload(
    runner: Runner, mode: DriverMode, state: LoadedDriver, root: str | os.PathLike[str]
) -> list[str]:
    """`rmmod erdma` if it is loaded in the other mode, then `modprobe erdma compat_mode=`."""
    actions: list[str] = []
    want = yes_no(mode.compat_mode)
    if state.loaded:
        log.info("unloading erdma to switch compat_mode to %s for mode %s", want, mode.value)
        result = await runner.run(["rmmod", MODULE])
        if not result.ok:
            raise in_use_error(result, state, loaded_driver(root))
        actions.append(f"unloaded erdma (was compat_mode={yes_no(bool(state.compat_mode))})")
    result = await runner.run(["modprobe", MODULE, f"compat_mode={want}"])
    if not result.ok:
        raise DriverError(
            f"loading erdma failed: {result.describe()}",
            "see the kernel log on the node (dmesg) for why the module refused to load",
        )
    actions.append(f"loaded erdma with compat_mode={want}")
    return actions


def missing_error(result: Result, installer: DriverInstaller | None) -> DriverMissing:
    """Why erdma cannot be loaded, and how to install it."""
    if installer is not None:
        remedy = (
            f"{installer.key} ran but did not install it; check what it does on the node, or "
            "install the eRDMA driver (elastic-rdma-drivers) by hand"
        )
    else:
        remedy = (
            "install the eRDMA driver on the node (a node image with the eRDMA stack), or "
            "turn on driverInstaller.enabled (with hostNamespace) so the agent runs Alibaba "
            "Cloud's installer, or set driverInstallCommand to a command that installs it; the "
            "agent keeps checking and loads the driver once it appears"
        )
    return DriverMissing(f"the erdma kernel module is not installed ({result.describe()})", remedy)


def in_use_error(result: Result, before: LoadedDriver, now: LoadedDriver) -> DriverError:
    """rmmod's refusal as a remedy: drain the node, or keep the mode that is loaded."""
    refcount = now.refcount if now.refcount is not None else before.refcount
    loaded = DriverMode.for_compat_mode(bool(before.compat_mode)).value
    said = (result.stderr or result.stdout).strip()
    if "in use" not in said and not refcount:
        return DriverError(
            f"unloading erdma failed: {result.describe()}",
            f"unload it by hand, or set {PREFER_DRIVER_KEY} to the loaded mode {loaded}",
        )
    users = f"{refcount} users" if refcount is not None else "users the kernel did not count"
    return DriverInUse(
        f"erdma is in use by {users} ({said or 'rmmod refused'})",
        f"drain the node (stop the RDMA workloads and modules using erdma) or set "
        f"{PREFER_DRIVER_KEY} to the loaded mode {loaded}",
    )


async def load_optional(runner: Runner, root: str | os.PathLike[str], module: str) -> str:
    """Best effort: load a helper module (smc, nvidia_peermem) if it exists; never raises."""
    if (HostRoot(root).sys / "module" / module).is_dir():
        return f"{module} already loaded"
    info = await runner.run(["modinfo", module])
    if not info.ok:
        return f"{module} not available: {info.describe()}"
    result = await runner.run(["modprobe", module])
    if not result.ok:
        return f"{module} failed to load: {result.describe()}"
    return f"loaded {module}"
