"""The kubelet stand-in admits pods as the real kubelet does (checked in tests/e2e).

The real agent on a simulated node; the stand-in's device manager picks Healthy free IDs (the
agent's preferred ones), never gives a slot twice, refuses a pod that asks for more than is
Healthy and free without calling Allocate, and writes kubelet_internal_checkpoint in the real
kubelet's layout, which the agent's SMC-R checkpoint fallback reads.
"""

from __future__ import annotations

import base64
import json

import pytest

from erdma.agent.smcr import checkpoint_pod_uid
from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.sim.admission import AdmissionError, DeviceManager
from erdma.sim.kubelet import CHECKPOINT
from erdma.sim.node import SimulatedNode

ERDMA = "aliyun/erdma"


async def test_admission_packs_never_gives_a_slot_twice_and_checkpoints(
    serving_node: SimulatedNode,
):
    manager = DeviceManager(serving_node.kubelet)
    first = await manager.admit("uid-a", "main", ERDMA, 2)
    second = await manager.admit("uid-b", "main", ERDMA, 1)
    assert len({*first.ids, *second.ids}) == 3
    assert {i.rpartition("/")[0] for i in first.ids} == {"erdma_0"} or {
        i.rpartition("/")[0] for i in first.ids
    } == {"erdma_1"}  # the agent packs two slots onto one device
    assert first.response.envs["ERDMA_DEVICES"] in ("erdma_0", "erdma_1")

    saved = json.loads((serving_node.kubelet.plugin_dir / CHECKPOINT).read_text())
    entries = saved["Data"]["PodDeviceEntries"]
    assert [(e["PodUID"], e["ContainerName"], e["ResourceName"]) for e in entries] == [
        ("uid-a", "main", ERDMA),
        ("uid-b", "main", ERDMA),
    ]
    numa = "0" if first.ids[0].startswith("erdma_0") else "1"  # the fixture's NUMA nodes
    assert entries[0]["DeviceIDs"] == {numa: first.ids}
    response = pb.ContainerAllocateResponse.FromString(base64.b64decode(entries[0]["AllocResp"]))
    assert response == first.response
    path = serving_node.kubelet.plugin_dir / CHECKPOINT
    assert checkpoint_pod_uid(path, second.ids[0], ERDMA) == "uid-b"


async def test_a_pod_asking_for_more_than_is_healthy_and_free_is_refused(
    serving_node: SimulatedNode,
):
    manager = DeviceManager(serving_node.kubelet)
    calls: list[list[str]] = []
    allocate = serving_node.kubelet.allocate

    async def counted(resource: str, ids: list[str]) -> pb.AllocateResponse:
        calls.append(ids)
        return await allocate(resource, ids)

    serving_node.kubelet.allocate = counted  # type: ignore[method-assign,assignment]
    await manager.admit("uid-a", "main", ERDMA, 3)
    with pytest.raises(AdmissionError, match=r"Requested: 2, Available: 1"):
        await manager.admit("uid-b", "main", ERDMA, 2)
    assert len(calls) == 1  # the refused pod never reached Allocate
    manager.release("uid-a")
    assert len((await manager.admit("uid-b", "main", ERDMA, 2)).ids) == 2
