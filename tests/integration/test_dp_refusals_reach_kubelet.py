"""Refusals reach kubelet as INVALID_ARGUMENT with their reason, however many IDs they name,
and GetPreferredAllocation answers only with IDs the plugin advertised.

The real agent on a simulated node, over the real device-plugin gRPC API. Before: a refusal
naming 3,000 bad IDs exceeded gRPC's 16 KiB metadata limit (kubelet saw RESOURCE_EXHAUSTED,
not the reason), and a preferred allocation could hold IDs never advertised (`zzz/2`).
"""

from __future__ import annotations

import grpc
import pytest

from erdma.sim.node import SimulatedNode

ERDMA = "aliyun/erdma"
BAD = [f"bad_{i}/{i}" for i in range(3000)]


async def test_a_refusal_naming_thousands_of_ids_arrives_with_its_reason(
    serving_node: SimulatedNode,
):
    with pytest.raises(grpc.aio.AioRpcError) as allocate:
        await serving_node.kubelet.allocate(ERDMA, BAD)
    with pytest.raises(grpc.aio.AioRpcError) as prefer:
        await serving_node.kubelet.preferred(ERDMA, ["erdma_0/0", *BAD], BAD, 3000)
    for error in (allocate.value, prefer.value):
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
        assert "bad_0/0" in error.details() and "2995 more" in error.details()
        assert len(error.details().encode()) < 1024


@pytest.mark.parametrize(
    ("available", "must", "size", "why"),
    [
        (["erdma_0/0", "zzz/2"], ["zzz/2"], 1, "['zzz/2'] were never advertised"),
        (["erdma_0/0", "erdma_9/1"], ["erdma_9/1"], 1, "['erdma_9/1'] were never advertised"),
        (["erdma_0/0", "erdma_9/1"], [], 2, "the 1 available IDs this plugin advertised"),
    ],
)
async def test_preferred_names_an_id_it_never_advertised_instead_of_answering_it(
    serving_node: SimulatedNode, available: list[str], must: list[str], size: int, why: str
):
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await serving_node.kubelet.preferred(ERDMA, available, must, size)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert why in error.value.details()
    advertised = list(serving_node.kubelet.latest(ERDMA) or {})
    answer = await serving_node.kubelet.preferred(ERDMA, ["erdma_9/1", *advertised], [], 2)
    assert set(answer) <= set(advertised)
