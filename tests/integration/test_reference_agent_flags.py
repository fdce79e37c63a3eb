"""The agent started with the reference's arguments serves kubelet and warns about each."""

from __future__ import annotations

from pathlib import Path

from erdma.sim.node import SimulatedNode


async def test_reference_arguments_run_and_are_warned_about(short_root: Path) -> None:
    args = ["--deviceplugin-prestart-container=false", "--erdma-installer-version", "1.5.9"]
    node = SimulatedNode(short_root, "default", args)
    try:
        await node.start()
        await node.wait_registered("aliyun/erdma")
    finally:
        await node.stop()
    log = node.log_path.read_text()
    assert "--deviceplugin-prestart-container is deprecated; use --prestart-container" in log
    assert "--erdma-installer-version is ignored" in log
