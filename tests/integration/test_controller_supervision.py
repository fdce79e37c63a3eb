"""Each background task of `erdma controller`, killed by an injected exception, has the chosen
outcome: the webhook certificate keeper is restarted while the webhooks keep serving; the
operator and leader election take the process down on purpose (every port closed), because a
replica that cannot tell whether it leads must not keep reconciling."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from erdma.aio import TaskFailed
from erdma.controller import main as controller_main
from erdma.controller import orphans, webhooks
from erdma.controller.config import ControllerConfig, parse_config
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import cloud_for, standard_world
from tests.fakes.ports import free_port
from tests.waiting import until

pytest_plugins = ["tests.integration.conftest_kubeapi"]


class InjectedFailure(RuntimeError):
    """What the test throws into a task."""


def failing_once(real: Callable[..., Any], what: str) -> Callable[..., Any]:
    runs = 0

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise InjectedFailure(f"injected into {what}")
        return await real(*args, **kwargs)

    return wrapper


def config_for(tmp_path: Path) -> ControllerConfig:
    suffix = re.sub("[^a-z0-9]", "", tmp_path.name[-8:].lower())  # a valid object name
    return parse_config(
        {
            "region": "cn-hangzhou",
            "healthPort": free_port(),
            "enableWebhook": True,
            "webhookPort": free_port(),
            "certDir": str(tmp_path),
            "controllerNamespace": "default",
            "controllerName": f"erdma-supervision-{suffix}",
            "smcInitImage": "erdma-k8s:test",
            "leaseDurationSeconds": 4,
        }
    )


async def answers(port: int, path: str = "/healthz") -> bool:
    url = f"http://127.0.0.1:{port}{path}"
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as reply:
            return reply.status == 200
    except aiohttp.ClientError:
        return False


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def test_a_dead_webhook_certificate_keeper_is_restarted(
    kube_api, tmp_path, caplog, monkeypatch
):
    monkeypatch.setattr(
        webhooks, "maintain_webhooks", failing_once(webhooks.maintain_webhooks, "the keeper")
    )
    config = config_for(tmp_path)
    caplog.set_level(logging.ERROR, logger="erdma.controller.main")
    with EcsEmulator(standard_world()).in_thread() as emu:
        stop = asyncio.Event()
        task = asyncio.create_task(
            controller_main.run_controller(
                config, cloud_for(emu), kubeconfig=kube_api.kubeconfig, stop=stop
            )
        )
        try:
            for _ in range(150):
                if "restart 1 in" in caplog.text:
                    break
                await asyncio.sleep(0.1)
            failure = next(
                r for r in caplog.records if "'webhook certificates' failed" in r.getMessage()
            )
            assert failure.exc_info is not None and failure.exc_info[0] is InjectedFailure
            await asyncio.sleep(1.0)  # past the restart delay: the real keeper runs now
            assert not task.done()
            assert await answers(config.health_port)
            assert listening(config.webhook_port)
        finally:
            stop.set()
            await asyncio.wait_for(task, 20)


@pytest.mark.parametrize(
    ("leader_elect", "target", "task_name"),
    [
        (True, "leader election", "leader election"),
        (False, "operator", "operator"),
    ],
)
async def test_a_dead_operator_or_elector_stops_the_controller_on_purpose(
    kube_api, tmp_path, caplog, monkeypatch, leader_elect, target, task_name
):
    if leader_elect:
        elector = controller_main.LeaderElector
        monkeypatch.setattr(elector, "run", failing_once(elector.run, target))
    else:
        monkeypatch.setattr(
            controller_main, "run_operator", failing_once(controller_main.run_operator, target)
        )
    config = config_for(tmp_path)
    caplog.set_level(logging.CRITICAL, logger="erdma.controller.main")
    with EcsEmulator(standard_world()).in_thread() as emu:
        run = controller_main.run_controller(
            config, cloud_for(emu), kubeconfig=kube_api.kubeconfig, leader_elect=leader_elect
        )
        with pytest.raises(TaskFailed, match=rf"'{task_name}' failed \(InjectedFailure"):
            await asyncio.wait_for(run, 30)
    assert f"background task {task_name!r} failed" in caplog.text
    assert "stopping the process" in caplog.text
    assert not listening(config.health_port) and not listening(config.webhook_port)


async def test_a_dead_orphan_sweep_is_restarted_while_the_operator_runs(
    kube_api, tmp_path, caplog, monkeypatch
):
    """The workers and the orphan sweeps run under the same Supervisor as every long-lived task:
    one that dies is logged with its traceback and run again, not lost without a word."""
    runs = 0
    real = orphans.OrphanSweeper.run

    async def counted(self: orphans.OrphanSweeper, interval: float) -> None:
        nonlocal runs
        runs += 1
        await real(self, interval)

    monkeypatch.setattr(orphans.OrphanSweeper, "run", failing_once(counted, "the sweeps"))
    config = config_for(tmp_path)
    caplog.set_level(logging.ERROR, logger="erdma.controller.handlers")
    with EcsEmulator(standard_world()).in_thread() as emu:
        stop = asyncio.Event()
        task = asyncio.create_task(
            controller_main.run_controller(
                config,
                cloud_for(emu),
                kubeconfig=kube_api.kubeconfig,
                stop=stop,
                leader_elect=False,
            )
        )
        try:
            await until(lambda: runs >= 1, what="the orphan sweeps to run again after dying")
            failure = next(r for r in caplog.records if "'orphan sweeps' failed" in r.getMessage())
            assert failure.exc_info is not None and failure.exc_info[0] is InjectedFailure
            assert not task.done()
        finally:
            stop.set()
            await asyncio.wait_for(task, 20)
