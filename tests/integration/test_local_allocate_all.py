"""Local mode with an exposedLocalERIs selection gives every exposed device to each container.

The reference forces allocate-all there and its NCCL example relies on it: a pod asking for
`aliyun/erdma: 1` sees both NICs. With the selection empty, allocation stays NUMA-aware.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from erdma.sim.node import SimulatedNode

ERDMA = "aliyun/erdma"


@pytest.mark.parametrize(
    ("args", "devices"),
    [
        (["--exposed-local-eris", "i-* erdma_*"], "erdma_0,erdma_1"),
        ([], "erdma_0"),
    ],
)
async def test_one_slot_gets_what_the_selection_implies(
    short_root: Path, args: list[str], devices: str
) -> None:
    node = SimulatedNode(short_root, "default", args)
    try:
        await node.start()
        await node.wait_registered(ERDMA)
        first = sorted(node.kubelet.latest(ERDMA) or {})[0]
        response = await node.kubelet.allocate(ERDMA, [first])
        assert response.container_responses[0].envs["ERDMA_DEVICES"] == devices
    finally:
        await node.stop()
