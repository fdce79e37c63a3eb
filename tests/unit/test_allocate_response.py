"""The Allocate answer built in place: every field of every container, in kubelet's order, and
nothing set that an allocation does not have."""

from __future__ import annotations

from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.deviceplugin.convert import allocate_response
from erdma.deviceplugin.plugin import ContainerAllocation, DeviceNode, Mount


def test_each_container_gets_exactly_its_allocation_in_order():
    full = ContainerAllocation(
        envs={"ERDMA_DEVICES": "erdma_0", "SMCR_PNET": "p0"},
        devices=[DeviceNode("/dev/infiniband/uverbs0", "/dev/infiniband/uverbs0")],
        mounts=[Mount("/opt/lib", "/usr/lib/rdma", read_only=False)],
        annotations={"cdi.k8s.io/erdma": "aliyun.com/erdma=erdma_0"},
        cdi_devices=["aliyun.com/erdma=erdma_0"],
    )
    response = allocate_response([full, ContainerAllocation()])

    assert response == pb.AllocateResponse(
        container_responses=[
            pb.ContainerAllocateResponse(
                envs={"ERDMA_DEVICES": "erdma_0", "SMCR_PNET": "p0"},
                devices=[
                    pb.DeviceSpec(
                        host_path="/dev/infiniband/uverbs0",
                        container_path="/dev/infiniband/uverbs0",
                        permissions="rw",
                    )
                ],
                mounts=[
                    pb.Mount(host_path="/opt/lib", container_path="/usr/lib/rdma", read_only=False)
                ],
                annotations={"cdi.k8s.io/erdma": "aliyun.com/erdma=erdma_0"},
                cdi_devices=[pb.CDIDevice(name="aliyun.com/erdma=erdma_0")],
            ),
            pb.ContainerAllocateResponse(),
        ]
    )


def test_no_allocations_answer_no_containers():
    assert allocate_response([]) == pb.AllocateResponse()
