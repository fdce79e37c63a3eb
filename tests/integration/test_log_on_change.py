"""A problem that persists is logged once, when it appears or changes, not at every rescan or
list refresh (a device skipped for good used to log twice a second, ~171k lines a day)."""

from __future__ import annotations

import asyncio
import logging

from erdma.agent.config import build_config
from erdma.agent.service import Agent
from erdma.deviceplugin.plugin import PluginDevice
from erdma.sim import fakehost
from erdma.sim.kubelet import FakeKubelet
from tests.integration.deviceplugin_support import ToyPlugin, manager_for, until_listed

SKIP = "skipping RDMA device"


async def test_a_device_skipped_for_good_is_logged_once_and_its_recovery_once(short_root, caplog):
    host = fakehost.build(short_root / "host", "default")
    ibdev = host.root / "sys/class/infiniband_verbs/uverbs1/ibdev"
    ibdev.unlink()  # no uverbs node maps to erdma_1 (ib_uverbs half loaded): skipped
    kubelet = FakeKubelet(short_root / "kubelet" / "device-plugins")
    await kubelet.start()
    flags = {
        "host_root": host.root,
        "kubelet_dir": short_root / "kubelet",
        "local_eri_discovery": True,
        "metrics_port": 0,
        "rescan_interval": 0.05,
        "prepare_node": False,
    }
    caplog.set_level(logging.INFO)
    agent = Agent(build_config(environ={}, flags=flags))
    stop = asyncio.Event()
    running = asyncio.create_task(agent.run(stop))
    try:
        await kubelet.wait_for(lambda: bool(kubelet.latest("aliyun/erdma")), 10, "listed")
        await asyncio.sleep(1.0)  # some 20 rescans
        skips = [r for r in caplog.records if r.getMessage() == SKIP]
        assert len(skips) == 1 and skips[0].__dict__["device"] == "erdma_1"
        ibdev.write_text("erdma_1\n")  # the mapping is back
        await kubelet.wait_for(
            lambda: any(k.startswith("erdma_1/") for k in kubelet.latest("aliyun/erdma") or {}),
            10,
            "erdma_1 back",
        )
        await asyncio.sleep(0.3)
        back = [r for r in caplog.records if r.getMessage() == "RDMA device no longer skipped"]
        assert len(back) == 1 and len([r for r in caplog.records if r.getMessage() == SKIP]) == 1
    finally:
        stop.set()
        await running
        await kubelet.stop()


async def test_a_bad_device_id_is_logged_once_across_refreshes(kubelet, kubelet_root, caplog):
    plugin = ToyPlugin(["t0", "", "t1"])
    async with manager_for(kubelet_root, plugin) as manager:
        await until_listed(kubelet, {"t0": "Healthy", "t1": "Healthy"})
        runner = manager.runner(plugin.resource_name)
        for _ in range(5):
            runner.refresh(force=True)  # the periodic full re-send
        plugin.set_devices([PluginDevice("t0"), PluginDevice("t1")])
        await until_listed(kubelet, {"t0": "Healthy", "t1": "Healthy"})
    left_out = [r for r in caplog.records if r.msg == "device left out of the list"]
    assert len(left_out) == 1
