"""The real kubelet's pod-resources API lists a pod's `aliyun/erdma` devices, and the agent's
own reader of it (how SMC-R finds the pod holding a device) understands that answer."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from erdma.agent.smcr import find_pod
from erdma.api.podresources.v1 import api_pb2 as pb
from erdma.api.podresources.v1 import api_pb2_grpc as rpc
from tests.e2e.node_support import Node
from tests.e2e.pods_support import pod_manifest, unique

pytestmark = pytest.mark.root
ERDMA = "aliyun/erdma"


def test_pod_resources_names_the_pod_holding_each_device(node: Node) -> None:
    agent = node.agent("default")
    slots = int(agent.config["slotsPerDevice"])
    node.wait_allocatable(ERDMA, 2 * slots)
    pod, _ = node.run(pod_manifest(unique("podres"), node.kubelet.node, {ERDMA: "2"}))
    name = pod["metadata"]["name"]
    socket = node.kubelet.pod_resources_socket

    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = rpc.PodResourcesListerStub(channel)
        listed = stub.List(pb.ListPodResourcesRequest(), timeout=10)
        allocatable = stub.GetAllocatableResources(pb.AllocatableResourcesRequest(), timeout=10)
    (entry,) = [p for p in listed.pod_resources if p.name == name]
    (container,) = entry.containers
    ids = sorted(i for d in container.devices if d.resource_name == ERDMA for i in d.device_ids)
    assert len(ids) == 2
    every = {i for d in allocatable.devices if d.resource_name == ERDMA for i in d.device_ids}
    assert len(every) == 2 * slots and set(ids) <= every

    for device_id in ids:
        assert asyncio.run(find_pod(socket, device_id)) == ("default", name)
