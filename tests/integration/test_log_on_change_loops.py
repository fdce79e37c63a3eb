"""The agent's retry loops say what is wrong once, when it starts or changes, not at every
attempt: a kubelet away for an hour, an unwritable CDI directory or a missing SMC module must
not fill the log with the same warning."""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import replace

import pytest

from erdma.agent.config import build_config
from erdma.agent.service import Agent
from erdma.deviceplugin.lifecycle import Timing
from erdma.host.run import RecordingRunner
from erdma.sim import fakehost
from erdma.sim.fakecmds import KmodCommands
from erdma.sim.fakehost_specs import ERDMA0, ERDMA1, erdma_node
from erdma.sim.kubelet import FakeKubelet
from tests.integration.deviceplugin_support import TOY, ToyPlugin, manager_for

FAST = Timing(backoff_initial=0.01, backoff_max=0.02)
ERDMA = "aliyun/erdma"


def warnings(caplog, message: str, error: str = "") -> int:
    """Records of ``message`` whose ``error`` extra contains ``error``."""
    return sum(
        r.getMessage() == message and error in str(r.__dict__.get("error", ""))
        for r in caplog.records
    )


async def test_registration_failing_while_kubelet_is_away_is_logged_once(plugin_dir, caplog):
    caplog.set_level(logging.INFO, logger="erdma.deviceplugin")
    kubelet = FakeKubelet(plugin_dir)
    async with manager_for(plugin_dir.parent, ToyPlugin(["a0"]), timing=FAST):
        await asyncio.sleep(1.0)  # some 50 attempts while kubelet.sock is missing
        assert warnings(caplog, "registration failed") == 1
        await kubelet.start()
        await kubelet.wait_for(lambda: kubelet.registered(TOY), 5, "registered")
        await kubelet.stop()
        kubelet.fail_next_registers(1000)
        await kubelet.restart()  # a new kubelet that refuses: a new problem, logged once more
        await asyncio.sleep(0.5)
        assert len(kubelet.register_attempts) > 5
        # (the socket may be missing for a moment during the restart: that is logged too)
        assert warnings(caplog, "registration failed", "injected Register failure") == 1
        assert warnings(caplog, "registration failed") <= 3
    await kubelet.stop()


async def run_agent_for(seconds: float, host_root, kubelet_root, runner=None, **settings):
    """Run the agent in process for ``seconds`` (rescanning every 50 ms) against a kubelet."""
    flags = {
        "host_root": host_root,
        "kubelet_dir": kubelet_root,
        "local_eri_discovery": True,
        "metrics_port": 0,
        "rescan_interval": 0.05,
        "prepare_node": False,
        **settings,
    }
    agent = Agent(build_config(environ={}, flags=flags), runner=runner)
    kubelet = FakeKubelet(kubelet_root / "device-plugins")
    await kubelet.start()
    stop = asyncio.Event()
    running = asyncio.create_task(agent.run(stop))
    try:
        await kubelet.wait_for(lambda: kubelet.registered(ERDMA), 10, "registered")
        await asyncio.sleep(seconds)
    finally:
        stop.set()
        await running
        await kubelet.stop()


async def test_a_cdi_spec_that_cannot_be_written_is_logged_once(short_root, caplog):
    host = fakehost.build(short_root / "host", "default")
    blocked = short_root / "cdi"
    blocked.write_text("")  # a file where the spec directory should be
    caplog.set_level(logging.INFO)
    await run_agent_for(
        1.0,
        host.root,
        short_root / "kubelet",
        device_list_strategy="cdi-annotations",
        cdi_spec_dir=blocked,
    )
    unwritable = "cannot write the CDI spec: Allocate hands out device specs meanwhile"
    assert warnings(caplog, unwritable) == 1


@pytest.mark.parametrize("prepare_node", [True, False], ids=["agent prepares", "driver pod did"])
async def test_a_host_without_smc_is_logged_once(short_root, caplog, prepare_node):
    """The agent keeps the host pnet table whoever loaded the driver (the chart's driver
    DaemonSet does): a host without smc says so once, however often it is retried."""
    host = fakehost.build(short_root / "host", "default")
    host.unload_module("smc")
    runner = RecordingRunner(handlers=[KmodCommands(host, installed={"erdma"})])
    caplog.set_level(logging.INFO)
    await run_agent_for(
        1.5, host.root, short_root / "kubelet", runner=runner, prepare_node=prepare_node
    )
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("erdma driver ready") for m in said) == prepare_node
    message = "host SMC pnet table not set up: SMC-R in pods will fall back to TCP"
    assert warnings(caplog, message) == 1


async def test_a_device_whose_name_is_too_long_is_logged_once(short_root, caplog):
    long = replace(ERDMA1, name="erdma_" + "x" * 60)
    host = fakehost.build(short_root / "host", replace(erdma_node(), rdma=(ERDMA0, long)))
    caplog.set_level(logging.INFO)
    await run_agent_for(1.0, host.root, short_root / "kubelet")
    assert warnings(caplog, "device not advertised") == 1


async def test_a_busy_metrics_port_is_logged_once(short_root, caplog):
    host = fakehost.build(short_root / "host", "default")
    with socket.create_server(("0.0.0.0", 0)) as busy:
        port = busy.getsockname()[1]
        caplog.set_level(logging.INFO)
        await run_agent_for(3.5, host.root, short_root / "kubelet", metrics_port=port)
    naming = [
        r for r in caplog.records if r.levelno >= logging.WARNING and str(port) in r.getMessage()
    ]
    assert len(naming) == 1, [r.getMessage() for r in naming]
