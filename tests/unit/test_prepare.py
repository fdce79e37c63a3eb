"""Node preparation: one structured result per attempt, and retries until the node is ready."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from erdma.agent.prepare import PrepareResult, keep_preparing, prepare
from erdma.aio import Backoff
from erdma.host.driver import DriverMode
from erdma.host.run import RecordingRunner
from erdma.sim import fakehost
from erdma.sim.fakecmds import KmodCommands


def make(tmp_path: Path, variant: str = "default", **kmod):
    host = fakehost.build(tmp_path / "host", variant)
    cmds = KmodCommands(host, **kmod)
    return host, cmds, RecordingRunner(handlers=[cmds])


async def test_gpu_node_is_prepared_for_ofed_without_configuration(tmp_path):
    host, _, runner = make(tmp_path, "gpu")
    result = await prepare(runner, host.root)
    assert result.ready
    assert result.mode is DriverMode.OFED
    assert result.reason.startswith("automatic: 8 NVIDIA GPU")
    assert (result.loaded, result.compat_mode) == (True, True)
    assert result.problem is None


async def test_explicit_prefer_driver_switches_a_default_node(tmp_path):
    host, _, runner = make(tmp_path, "default")
    result = await prepare(runner, host.root, prefer="compat")
    assert (result.mode, result.reason) == (DriverMode.COMPAT, "preferDriver=compat")
    assert result.ready and result.compat_mode is True
    assert result.actions == (
        "unloaded erdma (was compat_mode=N)",
        "loaded erdma with compat_mode=Y",
    )


async def test_second_run_is_a_no_op(tmp_path):
    host, _, runner = make(tmp_path, "default")
    await prepare(runner, host.root, prefer="compat")
    runner.calls.clear()
    again = await prepare(runner, host.root, prefer="compat")
    assert again.ready
    assert runner.calls == [("modinfo", "nvidia_peermem")]  # best effort, still absent
    assert again.actions == ("erdma already loaded with compat_mode=Y",)


async def test_invalid_prefer_driver_is_a_configuration_error(tmp_path):
    host, _, runner = make(tmp_path, "default")
    with pytest.raises(ValueError, match=r"preferDriver='gpu'.*default, compat, ofed"):
        await prepare(runner, host.root, prefer="gpu")
    assert runner.calls == []


async def test_module_in_use_becomes_a_problem_with_a_remedy_not_a_crash(tmp_path):
    host, _, runner = make(tmp_path, "gpu")
    host.set_refcount("erdma", 2)
    result = await prepare(runner, host.root, prefer="default")
    assert not result.ready
    assert result.problem is not None
    assert result.problem.summary.startswith("erdma is in use by 2 users")
    assert "set preferDriver to the loaded mode compat" in result.problem.remedy
    assert (result.loaded, result.compat_mode) == (True, True)


async def test_missing_driver_becomes_a_problem(tmp_path):
    host, _, runner = make(tmp_path, "driver-not-loaded", installed={"smc"})
    result = await prepare(runner, host.root)
    assert (result.mode, result.loaded, result.ready) == (DriverMode.DEFAULT, False, False)
    assert result.problem is not None
    assert "not installed" in result.problem.summary
    assert "driverInstallCommand" in result.problem.remedy


async def test_keep_preparing_waits_with_backoff_until_the_driver_is_installed(tmp_path, caplog):
    host, cmds, runner = make(tmp_path, "driver-not-loaded", installed={"smc"})
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) == 4:  # the node image's installer finishes meanwhile
            cmds.installed.add("erdma")

    async def attempt() -> PrepareResult:
        return await prepare(runner, host.root)

    with caplog.at_level(logging.WARNING, logger="erdma.agent.prepare"):
        result = await keep_preparing(attempt, Backoff(initial=1, maximum=5), sleep=sleep)
    assert result.ready and result.compat_mode is False
    ceilings = [1, 2, 4, 5]  # doubling, capped; each delay jittered into [ceiling/2, ceiling]
    assert len(delays) == 4
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True)), delays
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # the same problem is reported once, not on every retry
    assert "not installed" in warnings[0].getMessage()


async def test_keep_preparing_reports_a_changed_problem_again(tmp_path, caplog):
    host, _, runner = make(tmp_path, "default")
    host.set_refcount("erdma", 1)
    calls = 0

    async def sleep(seconds: float) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            host.set_refcount("erdma", 4)  # more users now: a different problem
        else:
            host.set_refcount("erdma", 0)  # drained

    async def attempt() -> PrepareResult:
        return await prepare(runner, host.root, prefer="compat")

    with caplog.at_level(logging.WARNING, logger="erdma.agent.prepare"):
        result = await keep_preparing(attempt, sleep=sleep)
    assert result.ready and result.compat_mode is True
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == 2
    assert "in use by 1 users" in messages[0] and "in use by 4 users" in messages[1]
