"""A restarting kubelet deletes every ResourceSlice of its node; the agent's DRA driver puts its
own back, so the node keeps offering its eRDMA devices to the scheduler.

The real kubelet (shared/tools/kubelet) is stopped and started again on the same state dir, as
on a node; the agent keeps running. The slice that comes back is a new object (a new uid: the
kubelet's deletion happened) with the devices published before. How long the restore took,
from the agent's log, is recorded beside the other e2e measurements, never asserted.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.kubelet_support import record, wait_for
from tests.e2e.node_support import Node

pytestmark = pytest.mark.root
DRIVER = "erdma.aliyun.com"
DELETED = "ResourceSlice was deleted; restoring it"
RESTORED = "ResourceSlice restored"


def _devices(slice_: dict[str, Any]) -> list[str]:
    return sorted(d["name"] for d in slice_["spec"].get("devices") or [])


def test_kubelet_restart_deletes_the_slice_and_the_agent_restores_it(node: Node) -> None:
    agent = node.agent("default", {"dra": {"enabled": True}})
    wait_for(lambda: "DRA driver registered with kubelet" in agent.log, "DRA registration")
    (before,) = wait_for(
        lambda: [s for s in node.slices(DRIVER) if len(_devices(s)) == 2],
        "our ResourceSlice with both devices",
    )

    node.kubelet.stop_kubelet()
    node.kubelet.start()

    def restored() -> list[dict[str, Any]]:
        return [
            s
            for s in node.slices(DRIVER)
            if s["metadata"]["uid"] != before["metadata"]["uid"] and _devices(s) == _devices(before)
        ]

    (after,) = wait_for(restored, "our ResourceSlice back after the kubelet deleted it")
    assert after["metadata"]["name"] == before["metadata"]["name"]
    assert after["spec"]["pool"] == before["spec"]["pool"]
    deleted = wait_for(lambda: agent.log_times(DELETED), "the agent's log of the deletion")[0]
    again = [t for t in agent.log_times(RESTORED) if t >= deleted]
    assert again, agent.log
    record(
        f"DRA slice restored {again[0] - deleted:.3f}s after the agent saw the kubelet delete it"
    )
