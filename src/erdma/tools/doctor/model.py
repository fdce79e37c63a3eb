"""What a doctor check sees (DoctorContext) and what it says (Finding), plus the check registry.

Checks are small functions of a context so that tests can run each one against a fixture host
with a chosen environment, memlock limit and CPU architecture, without touching the test runner's
own process settings.
"""

from __future__ import annotations

import enum
import os
import platform
import resource
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from erdma.host.devices import scan
from erdma.host.model import DeviceSnapshot
from erdma.host.sysfs import HostRoot


class Verdict(enum.Enum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True)
class Outcome:
    """A check's verdict, what it saw, and what to do about it (empty when nothing)."""

    verdict: Verdict
    message: str
    remedy: str = ""


@dataclass(frozen=True)
class Finding:
    """An Outcome with the name of the check that produced it, as reported."""

    check: str
    title: str
    outcome: Outcome


def _memlock_limits() -> tuple[int, int]:
    return resource.getrlimit(resource.RLIMIT_MEMLOCK)


@dataclass(frozen=True)
class DoctorContext:
    """The host view a check reads: a root for sys/dev/etc, a proc tree, env and limits."""

    root: HostRoot
    proc: Path
    snapshot: DeviceSnapshot
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    memlock: Callable[[], tuple[int, int]] = _memlock_limits
    machine: str = field(default_factory=platform.machine)

    @classmethod
    def create(
        cls,
        root: str | os.PathLike[str] = "/",
        proc_root: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
        memlock: Callable[[], tuple[int, int]] = _memlock_limits,
        machine: str | None = None,
    ) -> DoctorContext:
        """Scan `root`; /proc defaults to `<root>/proc`, so a fixture tree is self-contained."""
        host = HostRoot(root)
        return cls(
            root=host,
            proc=Path(proc_root) if proc_root is not None else host.path("proc"),
            snapshot=scan(root),
            environ=dict(os.environ) if environ is None else environ,
            memlock=memlock,
            machine=platform.machine() if machine is None else machine,
        )


CheckFunc = Callable[[DoctorContext], Outcome]


@dataclass(frozen=True)
class Check:
    name: str
    title: str
    func: CheckFunc


REGISTRY: list[Check] = []


def check(name: str, title: str) -> Callable[[CheckFunc], CheckFunc]:
    """Register a check; the registry keeps definition order, which is the report order."""

    def register(func: CheckFunc) -> CheckFunc:
        if any(c.name == name for c in REGISTRY):
            raise ValueError(f"doctor check {name!r} registered twice")
        REGISTRY.append(Check(name, title, func))
        return func

    return register
