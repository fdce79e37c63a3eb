"""Node preparation: choose the driver mode, get erdma loaded in it, and report the outcome.

The reference agent panicked when the driver was missing or busy, so the pod crash-looped and
the reason scrolled away in restart logs. Here one attempt returns a `PrepareResult` (mode and
why, what is loaded, what was done, and a problem with its remedy), and `keep_preparing`
retries with backoff until the node is ready, logging each new problem once. The agent stays
up, and the result can be shown as it is (status, events, `erdma doctor`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from erdma.aio import Backoff
from erdma.host.devices import scan
from erdma.host.driver import (
    DriverError,
    DriverInstaller,
    DriverMode,
    InstallReport,
    choose_mode,
    loaded_driver,
    switch_mode,
)
from erdma.host.model import Gpu
from erdma.host.run import Runner

if TYPE_CHECKING:
    from erdma.agent.config import AgentConfig
    from erdma.agent.events import NodeEvents

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Problem:
    """Why the node is not ready, and what a person can do about it."""

    summary: str
    remedy: str

    def __str__(self) -> str:
        return f"{self.summary}; {self.remedy}"


@dataclass(frozen=True)
class PrepareResult:
    """One attempt's outcome, complete enough to show a person without reading logs."""

    mode: DriverMode
    reason: str  # why this mode: the configured preferDriver, or what automatic choice saw
    loaded: bool
    compat_mode: bool | None  # None: not loaded, or the upstream driver
    actions: tuple[str, ...]
    notes: tuple[str, ...]  # best-effort steps (smc, nvidia_peermem) and observations
    problem: Problem | None = None
    installed: InstallReport | None = None  # this attempt installed the driver

    @property
    def ready(self) -> bool:
        return self.problem is None and self.loaded


async def prepare(
    runner: Runner,
    root: str | os.PathLike[str] = "/",
    prefer: str | None = None,
    installer: DriverInstaller | None = None,
    gpus: Sequence[Gpu] | None = None,
) -> PrepareResult:
    """One attempt at preparing the node; safe to repeat.

    `prefer` is `preferDriver` (empty or None: automatic, from `gpus` or a scan of `root`).
    An invalid `prefer` raises ValueError: that is a configuration error, not a node state.
    """
    found = scan(root).gpus if gpus is None else gpus
    mode, reason = choose_mode(prefer, found)
    try:
        done = await switch_mode(runner, mode, root, installer)
    except DriverError as exc:
        state = loaded_driver(root)
        return PrepareResult(
            mode,
            reason,
            state.loaded,
            state.compat_mode,
            (),
            (),
            Problem(exc.problem, exc.remedy),
        )
    return PrepareResult(
        mode,
        reason,
        done.driver.loaded,
        done.driver.compat_mode,
        done.actions,
        done.notes,
        installed=done.installed,
    )


async def keep_preparing(
    attempt: Callable[[], Awaitable[PrepareResult]],
    backoff: Backoff | None = None,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    on_problem: Callable[[Problem], None] | None = None,
) -> PrepareResult:
    """Repeat `attempt`, waiting a `Backoff` step (2 s growing to 5 min) between, until ready.

    A problem is logged (and passed to `on_problem`) when it first appears or changes, not on
    every retry, so a node waiting for its driver to be installed says so once and then waits
    quietly.
    """
    backoff = backoff or Backoff(initial=2.0, maximum=300.0)
    last: Problem | None = None
    while True:
        result = await attempt()
        if result.ready:
            log.info(
                "erdma driver ready: mode %s (%s); %s",
                result.mode,
                result.reason,
                "; ".join(result.actions + result.notes),
            )
            return result
        problem = result.problem or Problem(
            "erdma is not loaded after preparing", "see the kernel log on the node (dmesg)"
        )
        if problem != last:
            log.warning(
                "erdma driver not ready (mode %s, %s): %s; retrying every %gs at most",
                result.mode,
                result.reason,
                problem,
                backoff.maximum,
            )
            last = problem
            if on_problem is not None:
                on_problem(problem)
        await sleep(backoff.next_delay())


async def prepare_until_ready(
    config: AgentConfig,
    runner: Runner,
    mode: DriverMode,
    gpus: Sequence[Gpu],
    events: NodeEvents,
) -> PrepareResult:
    """Prepare the node as configured until it is ready, saying on the Node what happened:
    each new problem, an install (and a download that ran without a pinned checksum, with the
    value that pins it), and the mode erdma is loaded in."""

    def problem_event(problem: Problem) -> None:
        events.emit("Warning", "ErdmaDriverNotReady", str(problem))

    installer = config.driver_installer.installer(config.driver_install_command)
    result = await keep_preparing(
        lambda: prepare(runner, config.host_root, mode.value, installer, gpus),
        on_problem=problem_event,
    )
    if result.installed is not None:
        events.emit("Normal", "ErdmaDriverInstalled", result.installed.message())
        if result.installed.unpinned:
            events.emit("Warning", "ErdmaInstallerUnpinned", result.installed.unpinned)
    events.emit(
        "Normal", "ErdmaDriverReady", f"erdma loaded in mode {mode.value} ({result.reason})"
    )
    return result
