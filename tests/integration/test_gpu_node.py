"""GPU nodes end to end: the real `erdma agent` process, the fake kubelet, NCCL variables.

On the `gpu` fixture host (eight NVIDIA GPUs, erdma in compat_mode=Y) the automatic driver mode
is `ofed`: containers get only their uverbs nodes and the NCCL variables that name exactly the
allocated devices and the GID index that carries the node's IPv4 address.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.sim import fakehost
from erdma.sim.node import SimulatedNode

ERDMA = "aliyun/erdma"
UVERBS0 = "/dev/infiniband/uverbs0"
UVERBS1 = "/dev/infiniband/uverbs1"
RDMA_CM = "/dev/infiniband/rdma_cm"
IPV6_ADDRESS = "2408:4005:3e0:1::20"

NodeFactory = Callable[..., SimulatedNode]


@pytest.fixture
async def make_node(short_root: Path) -> AsyncIterator[NodeFactory]:
    """Build a node (fixture host written, agent not started yet); every node is stopped after."""
    nodes: list[SimulatedNode] = []

    def make(spec: fakehost.HostSpec | str = "gpu", *args: str) -> SimulatedNode:
        node = SimulatedNode(short_root / str(len(nodes)), spec, ["--slots-per-device", "4", *args])
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        await node.stop()


async def serving(node: SimulatedNode) -> SimulatedNode:
    await node.start()
    await node.wait_registered(ERDMA)
    return node


def config_file(node: SimulatedNode, settings: dict[str, Any]) -> str:
    path = node.root / "agent.yaml"
    path.write_text(yaml.safe_dump(settings))
    return str(path)


def paths(container: pb.ContainerAllocateResponse) -> list[str]:
    return [d.host_path for d in container.devices]


def nccl(container: pb.ContainerAllocateResponse) -> dict[str, str]:
    return {k: v for k, v in container.envs.items() if k.startswith("NCCL_")}


def log_records(node: SimulatedNode) -> list[dict[str, Any]]:
    return [json.loads(line) for line in node.agent_log().splitlines() if line.startswith("{")]


def nccl_warnings(node: SimulatedNode) -> list[str]:
    return [
        r["msg"]
        for r in log_records(node)
        if r["level"] == "warning" and r["logger"] == "erdma.agent.nccl"
    ]


def gpus_on(numa: int) -> fakehost.HostSpec:
    """The `gpu` fixture host with all eight GPUs moved to one NUMA node."""
    spec = fakehost.variant("gpu")
    return replace(spec, gpus=tuple((address, numa) for address, _ in spec.gpus))


# -- automatic mode on a GPU node ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("slot", "uverbs", "hca"),
    [("erdma_0/0", UVERBS0, "=erdma_0"), ("erdma_1/2", UVERBS1, "=erdma_1")],
)
async def test_one_slot_gets_its_uverbs_only_and_nccl_names_that_device(
    make_node: NodeFactory, slot: str, uverbs: str, hca: str
):
    node = await serving(make_node("gpu"))
    [container] = (await node.kubelet.allocate(ERDMA, [slot])).container_responses
    assert paths(container) == [uverbs]
    assert nccl(container) == {"NCCL_IB_HCA": hca, "NCCL_IB_GID_INDEX": "1"}
    assert container.envs["ERDMA_DEVICES"] == hca.lstrip("=")
    [chosen] = [r for r in log_records(node) if r["msg"] == "driver mode chosen"]
    assert chosen["mode"] == "ofed" and "8 NVIDIA GPU(s)" in chosen["why"]


async def test_slots_on_two_devices_name_both_exactly(make_node: NodeFactory):
    node = await serving(make_node("gpu"))
    response = await node.kubelet.allocate(ERDMA, [["erdma_1/0", "erdma_0/3"], ["erdma_1/1"]])
    both, second = response.container_responses
    assert paths(both) == [UVERBS0, UVERBS1]
    assert nccl(both) == {"NCCL_IB_HCA": "=erdma_0,erdma_1", "NCCL_IB_GID_INDEX": "1"}
    assert nccl(second) == {"NCCL_IB_HCA": "=erdma_1", "NCCL_IB_GID_INDEX": "1"}


async def test_disagreeing_gid_tables_get_the_safe_setting_and_a_warning(make_node: NodeFactory):
    node = make_node("gpu")
    node.host.insert_gid("erdma_1", 1, IPV6_ADDRESS)  # erdma_1's IPv4 GID moves to index 2
    await serving(node)

    [alone] = (await node.kubelet.allocate(ERDMA, ["erdma_1/0"])).container_responses
    assert nccl(alone) == {"NCCL_IB_HCA": "=erdma_1", "NCCL_IB_GID_INDEX": "2"}
    assert nccl_warnings(node) == []

    [both] = (await node.kubelet.allocate(ERDMA, ["erdma_0/0", "erdma_1/1"])).container_responses
    assert nccl(both) == {
        "NCCL_IB_HCA": "=erdma_0,erdma_1",
        "NCCL_IB_GID_INDEX": "-1",
        "NCCL_IB_ADDR_FAMILY": "AF_INET",
        "NCCL_IB_ROCE_VERSION_NUM": "2",
    }
    [warning] = nccl_warnings(node)
    assert "GID index differs between devices (erdma_0=1, erdma_1=2)" in warning
    assert "NCCL_IB_GID_INDEX=-1" in warning


async def test_prefer_driver_default_gives_rdma_cm_and_no_nccl(make_node: NodeFactory):
    node = await serving(make_node("gpu", "--prefer-driver", "default"))
    response = await node.kubelet.allocate(ERDMA, [["erdma_0/0"], ["erdma_0/1", "erdma_1/0"]])
    first, second = response.container_responses
    assert paths(first) == [UVERBS0, RDMA_CM]
    assert paths(second) == [UVERBS0, UVERBS1, RDMA_CM]
    assert nccl(first) == nccl(second) == {}
    assert second.envs["ERDMA_DEVICES"] == "erdma_0,erdma_1"
    [chosen] = [r for r in log_records(node) if r["msg"] == "driver mode chosen"]
    assert chosen["mode"] == "default"


# -- nccl settings from the config file --------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        pytest.param({"enabled": False}, {}, id="disabled"),
        pytest.param(
            {"socketIfname": "eth0"},
            {"NCCL_IB_HCA": "=erdma_0", "NCCL_IB_GID_INDEX": "1", "NCCL_SOCKET_IFNAME": "eth0"},
            id="socketIfname",
        ),
        pytest.param(
            {"gidIndex": 3},
            {"NCCL_IB_HCA": "=erdma_0", "NCCL_IB_GID_INDEX": "3"},
            id="gidIndex",
        ),
        pytest.param(
            {
                "overrides": {
                    "NCCL_IB_QPS_PER_CONNECTION": "8",
                    "NCCL_IB_GID_INDEX": "5",
                    "NCCL_IB_HCA": "",
                }
            },
            {"NCCL_IB_QPS_PER_CONNECTION": "8", "NCCL_IB_GID_INDEX": "5"},
            id="overrides",
        ),
    ],
)
async def test_nccl_settings_from_the_config_file(
    make_node: NodeFactory, settings: dict[str, Any], expected: dict[str, str]
):
    node = make_node("gpu")
    node.agent_args += ["--config", config_file(node, {"nccl": settings})]
    await serving(node)
    [container] = (await node.kubelet.allocate(ERDMA, ["erdma_0/0"])).container_responses
    assert nccl(container) == expected
    assert paths(container) == [UVERBS0]  # still ofed: the settings change env only


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        pytest.param(
            {"gidIndex": 300},
            "nccl.gidIndex=300: Input should be less than or equal to 255",
            id="gidIndex-range",
        ),
        pytest.param(
            {"socketIfName": "eth0"},
            "nccl.socketIfName='eth0': unknown key; did you mean `socketIfname`?",
            id="misspelt-key",
        ),
        pytest.param(
            {"overrides": {"NCCL_IB_QPS_PER_CONNECTION": 8}},
            "nccl.overrides.NCCL_IB_QPS_PER_CONNECTION=8: Input should be a valid string",
            id="unquoted-override",
        ),
        pytest.param(
            {"enabled": "no"},
            "nccl.enabled='no': Input should be a valid boolean",
            id="string-bool",
        ),
    ],
)
async def test_bad_nccl_value_stops_the_agent_naming_the_key(
    make_node: NodeFactory, settings: dict[str, Any], named: str
):
    node = make_node("gpu")
    node.agent_args += ["--config", config_file(node, {"nccl": settings})]
    await node.start()
    assert node.process is not None
    code = await asyncio.wait_for(node.process.wait(), 20)
    assert code == 2, node.agent_log()
    log = node.agent_log()
    assert log.startswith("erdma agent: error: ") and f"invalid agent configuration: {named}" in log
    assert node.kubelet.registrations == []


# -- GetPreferredAllocation follows the GPUs -----------------------------------------------------


@pytest.mark.parametrize(("numa", "device"), [(0, "erdma_0"), (1, "erdma_1")])
async def test_preferred_allocation_follows_the_gpus_numa_node(
    make_node: NodeFactory, numa: int, device: str
):
    node = await serving(make_node(gpus_on(numa)))
    assert node.capacity_by_numa(ERDMA) == {"0": (4, 4), "1": (4, 4)}
    available = sorted(node.kubelet.latest(ERDMA) or {})
    assert await node.kubelet.preferred(ERDMA, available, [], 1) == [f"{device}/0"]
    assert await node.kubelet.preferred(ERDMA, available, [], 2) == [f"{device}/0", f"{device}/1"]
    # must-include IDs decide the NUMA node over the GPUs
    other = "erdma_1" if device == "erdma_0" else "erdma_0"
    assert await node.kubelet.preferred(ERDMA, available, [f"{other}/3"], 2) == [
        f"{other}/3",
        f"{other}/0",
    ]
