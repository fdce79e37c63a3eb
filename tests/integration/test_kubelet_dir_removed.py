"""The device-plugins directory removed as a whole (a node clean-up) and made again by kubelet:
the plugins register again, and every later kubelet restart is still noticed.

The plugins' lock directories live inside it and stay open, which keeps the removed directory's
inode alive: the kernel then reports only that it was deleted, never that its watch ended.
"""

from __future__ import annotations

import asyncio
import shutil

from tests.integration.deviceplugin_support import TOY, ToyPlugin, manager_for, until_listed


async def test_kubelet_restarts_after_the_directory_was_removed_are_noticed(kubelet, kubelet_root):
    async with manager_for(kubelet_root, ToyPlugin(["a0"])):
        await until_listed(kubelet, {"a0": "Healthy"})
        await kubelet.stop()
        shutil.rmtree(kubelet.plugin_dir)
        kubelet.generation += 1
        await kubelet.start()
        await kubelet.wait_for(lambda: kubelet.registered(TOY), 5, "registered after removal")
        await asyncio.sleep(1.0)  # past any re-arming of the watch
        await kubelet.restart()
        await kubelet.wait_for(lambda: kubelet.registered(TOY), 5, "registered after a restart")
        await until_listed(kubelet, {"a0": "Healthy"})
