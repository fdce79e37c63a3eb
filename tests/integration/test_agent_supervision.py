"""Each of the agent's background tasks, killed by an injected exception, is logged with its
traceback and restarted while kubelet keeps being served: nothing dies silently."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from erdma.aio import Supervisor
from erdma.deviceplugin.lifecycle import PluginRunner
from tests.integration.agent_support import ERDMA, start_agent

pytest_plugins = ["tests.integration.conftest_kubeapi"]

# per task: the settings that make the agent run it
TASK_SETTINGS: dict[str, dict[str, object]] = {
    "rescan": {},
    "node events": {},
    "prepare node": {"prepare_node": True},
    "instance id": {
        "exposed_local_eris": ["i-abc123 erdma_0"],
        "metadata_url": "http://127.0.0.1:9",
    },
    "regular mode": {"local_eri_discovery": False},
}


class InjectedFailure(RuntimeError):
    """What the test throws into a task."""


def fail_first_run(supervisor: Supervisor, name: str) -> None:
    """Make the first run of task ``name`` raise; later runs are the real task."""
    index = next(i for i, t in enumerate(supervisor.tasks) if t.name == name)
    task = supervisor.tasks[index]
    runs = 0

    async def run() -> object:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise InjectedFailure(f"injected into {name}")
        return await task.run()

    supervisor.tasks[index] = dataclasses.replace(task, run=run)


@pytest.mark.parametrize("name", sorted(TASK_SETTINGS))
async def test_each_agent_task_is_restarted_after_an_injected_failure(
    kube_api, short_root, caplog, name
):
    agent, kubelet = await start_agent(kube_api, short_root, **TASK_SETTINGS[name])
    assert name in [t.name for t in agent.supervisor.tasks]
    fail_first_run(agent.supervisor, name)
    stop = asyncio.Event()
    caplog.set_level(logging.ERROR, logger="erdma.agent.service")
    running = asyncio.create_task(agent.run(stop))
    try:
        await kubelet.wait_for(lambda: agent.supervisor.restarts[name] == 1, 10, f"{name} restart")
        await kubelet.wait_for(lambda: kubelet.registered(ERDMA), 10, "aliyun/erdma registered")
        failure = next(r for r in caplog.records if f"task {name!r} failed" in r.getMessage())
        assert failure.exc_info is not None and failure.exc_info[0] is InjectedFailure
        await asyncio.sleep(0.3)
        assert not running.done()  # the agent stays up
        assert agent.supervisor.restarts[name] == 1  # restarted once, now healthy
    finally:
        stop.set()
        await running
        await kubelet.stop()


async def test_a_dead_device_plugin_runner_is_restarted_and_registers_again(
    kube_api, short_root, caplog, monkeypatch
):
    real_run = PluginRunner.run
    runs = 0

    async def run_failing_once(self: PluginRunner) -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise InjectedFailure("injected into the aliyun/erdma runner")
        await real_run(self)

    monkeypatch.setattr(PluginRunner, "run", run_failing_once)
    agent, kubelet = await start_agent(kube_api, short_root)
    stop = asyncio.Event()
    caplog.set_level(logging.ERROR, logger="erdma.deviceplugin.manager")
    running = asyncio.create_task(agent.run(stop))
    try:
        await kubelet.wait_for(lambda: bool(kubelet.latest(ERDMA)), 10, "devices listed")
        assert agent.manager.restarts == {f"device plugin {ERDMA}": 1}
        assert "task 'device plugin aliyun/erdma' failed (InjectedFailure" in caplog.text
    finally:
        stop.set()
        await running
        await kubelet.stop()
