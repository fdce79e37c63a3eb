"""Two agents on one node (a rollout overlap, a second DaemonSet): the second waits while the
first serves, and takes over the moment the first stops, so kubelet never loses the resource."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys

from prometheus_client import CollectorRegistry

from erdma.deviceplugin.exclusive import ResourceLock
from erdma.deviceplugin.manager import PluginManager
from tests.integration.deviceplugin_support import TOY, ToyPlugin, until_listed


def agent(kubelet_root, plugin: ToyPlugin) -> PluginManager:
    return PluginManager([plugin], registry=CollectorRegistry(), kubelet_root=kubelet_root)


async def test_second_agent_waits_then_takes_over(kubelet, kubelet_root, caplog):
    caplog.set_level(logging.INFO, logger="erdma.deviceplugin.exclusive")
    first, second = agent(kubelet_root, ToyPlugin(["a0"])), agent(kubelet_root, ToyPlugin(["b0"]))
    await first.start()
    await until_listed(kubelet, {"a0": "Healthy"})
    await second.start()
    await asyncio.sleep(1.0)
    assert len(kubelet.registrations) == 1  # the second did not register over the first
    assert "another process serves this resource on this node; waiting" in caplog.text
    await first.stop()  # its socket goes; the resource must not be lost
    await until_listed(kubelet, {"b0": "Healthy"}, timeout=5)
    assert len(kubelet.registrations) == 2 and "took over serving" in caplog.text
    assert kubelet.registered(TOY)
    await second.stop()


async def test_lock_of_a_killed_holder_is_free_at_once(kubelet_root, tmp_path):
    """The kernel drops the lock with the process, even on SIGKILL: no stale lock to clean."""
    plugin_dir = kubelet_root / "device-plugins"
    plugin_dir.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import asyncio, sys; from pathlib import Path\n"
                "from erdma.deviceplugin.exclusive import ResourceLock\n"
                f"lock = ResourceLock(Path({str(plugin_dir)!r}), 'toy', 'example.com/toy')\n"
                "assert lock.try_acquire(); print('held', flush=True); sys.stdin.read()"
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    mine = ResourceLock(plugin_dir, "toy", "example.com/toy")
    assert not mine.try_acquire()
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert mine.try_acquire()
    await mine.__aexit__(None, None, None)


async def test_the_lock_survives_kubelet_wiping_the_directory(kubelet, kubelet_root):
    """Kubelet removes every file in device-plugins when it restarts, never directories."""
    first, second = agent(kubelet_root, ToyPlugin(["a0"])), agent(kubelet_root, ToyPlugin(["b0"]))
    await first.start()
    await until_listed(kubelet, {"a0": "Healthy"})
    await kubelet.restart()
    await second.start()
    await until_listed(kubelet, {"a0": "Healthy"}, timeout=5)  # the first re-registered
    await asyncio.sleep(0.5)
    assert kubelet.latest(TOY) == {"a0": "Healthy"}  # and the second still waits
    await second.stop()
    await first.stop()
