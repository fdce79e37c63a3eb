"""A config file changed on disk is noticed: one warning per change that a restart is needed.

The agent reads its settings once; an edit used to be ignored silently until the next restart.
"""

from __future__ import annotations

import json
from pathlib import Path

from erdma.sim.node import SimulatedNode
from tests.waiting import until

ERDMA = "aliyun/erdma"


def warnings(node: SimulatedNode) -> list[dict]:
    lines = [json.loads(line) for line in node.agent_log().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("msg", "").startswith("config file")]


async def test_each_change_is_logged_once_and_the_running_settings_stay(short_root: Path):
    config = short_root / "agent.json"
    config.write_text(json.dumps({"slotsPerDevice": 2}))
    node = SimulatedNode(short_root / "node", "default", ["--config", str(config)])
    await node.start()
    try:
        await node.wait_registered(ERDMA)
        config.write_text(json.dumps({"slotsPerDevice": 5}))
        await until(lambda: len(warnings(node)) == 1, 60, "the change logged")
        first = warnings(node)[0]
        assert first["level"] == "warning"
        assert "restarts" in first["msg"] and first["path"] == str(config)
        assert len(node.kubelet.latest(ERDMA) or {}) == 4  # still 2 slots x 2 devices
        config.write_text(json.dumps({"slotsPerDevice": 2}))  # back as loaded
        await until(lambda: len(warnings(node)) == 2, 60, "the change back logged")
        assert warnings(node)[1]["msg"] == "config file is again what this agent loaded"
        await node.kubelet.restart()  # time passes with the file unchanged: no new line
        await node.wait_registered(ERDMA)
        assert len(warnings(node)) == 2
    finally:
        await node.stop()
