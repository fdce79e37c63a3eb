"""SIGHUP and SIGINT stop the agent the way SIGTERM does: through its shutdown path.

A terminal closing (SIGHUP) or Ctrl-C (SIGINT) used to kill the agent at once, leaving its
plugin sockets behind in the kubelet's directory. Now each of them ends the run cleanly: the
sockets are removed, "agent stopped" is logged, and the exit code is 0.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from erdma.sim.node import SimulatedNode

ERDMA = "aliyun/erdma"


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name
)
async def test_the_signal_stops_the_agent_cleanly(short_root: Path, sig: signal.Signals):
    node = SimulatedNode(short_root / "node", "default", ["--slots-per-device", "2"])
    await node.start()
    try:
        await node.wait_registered(ERDMA)
        socket = Path(node.kubelet.endpoint(ERDMA).path)
        assert socket.exists()
        assert node.process is not None
        node.process.send_signal(sig)
        code = await asyncio.wait_for(node.process.wait(), 60)
        assert code == 0, node.agent_log()
        assert not socket.exists(), "the plugin socket was left behind"
        assert '"agent stopped"' in node.agent_log()
    finally:
        await node.stop()
