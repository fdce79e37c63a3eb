"""The real `erdma agent` process against the fake kubelet on fixture hosts."""

from __future__ import annotations

import asyncio
import sys
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest

from erdma.sim import fakehost
from erdma.sim.node import SimulatedNode
from tests.fakes.ports import free_port

ERDMA = "aliyun/erdma"


NodeFactory = Callable[..., "asyncio.Future[SimulatedNode]"]


@pytest.fixture
async def start_node(short_root: Path) -> AsyncIterator[Callable[..., object]]:
    nodes: list[SimulatedNode] = []

    async def start(spec: fakehost.HostSpec | str = "default", *args: str) -> SimulatedNode:
        node = SimulatedNode(short_root / str(len(nodes)), spec, ["--slots-per-device", "4", *args])
        nodes.append(node)
        await node.start()
        return node

    yield start
    for node in nodes:
        await node.stop()


def latest(node: SimulatedNode) -> dict[str, str]:
    return node.kubelet.latest(ERDMA) or {}


async def test_registers_and_lists_slots_per_numa_node(start_node):
    node = await start_node()
    await node.wait_registered(ERDMA)
    assert node.capacity_by_numa(ERDMA) == {"0": (4, 4), "1": (4, 4)}
    registration = node.kubelet.registrations[0]
    assert registration.options.get_preferred_allocation_available
    assert registration.endpoint.startswith("erdma-") and registration.endpoint.endswith(".sock")


async def test_survives_twenty_kubelet_restarts_in_a_row(start_node):
    node = await start_node()
    await node.wait_registered(ERDMA)
    for _ in range(20):
        await node.kubelet.restart()
        await node.kubelet.wait_for(
            lambda: node.kubelet.registered(ERDMA) and len(latest(node)) == 8,
            timeout=30.0,
            what="re-registered with the device list",
        )
    assert node.process is not None and node.process.returncode is None


async def test_port_down_and_up_reach_kubelet_within_a_second(start_node):
    node = await start_node()
    await node.wait_registered(ERDMA)
    node.host.set_port_state("erdma_1", False)
    await node.kubelet.wait_for(
        lambda: latest(node).get("erdma_1/0") == "Unhealthy", 1.0, "erdma_1 Unhealthy"
    )
    assert node.capacity_by_numa(ERDMA) == {"0": (4, 4), "1": (4, 0)}
    node.host.set_port_state("erdma_1", True)
    await node.kubelet.wait_for(
        lambda: latest(node).get("erdma_1/0") == "Healthy", 1.0, "erdma_1 Healthy again"
    )


async def test_vanished_uverbs_node_is_unhealthy_until_it_returns(start_node):
    node = await start_node()
    await node.wait_registered(ERDMA)
    node.host.remove_node("/dev/infiniband/uverbs0")
    await node.kubelet.wait_for(lambda: latest(node).get("erdma_0/3") == "Unhealthy", 30)
    node.host.mknod("/dev/infiniband/uverbs0", 231, 192)
    await node.kubelet.wait_for(lambda: latest(node).get("erdma_0/3") == "Healthy", 30)


async def test_allocate_two_containers_in_one_request(start_node):
    node = await start_node()
    await node.wait_registered(ERDMA)
    response = await node.kubelet.allocate(ERDMA, [["erdma_0/0"], ["erdma_1/0", "erdma_0/1"]])
    first, second = response.container_responses
    assert [d.host_path for d in first.devices] == [
        "/dev/infiniband/uverbs0",
        "/dev/infiniband/rdma_cm",
    ]
    assert [d.host_path for d in second.devices] == [
        "/dev/infiniband/uverbs0",
        "/dev/infiniband/uverbs1",
        "/dev/infiniband/rdma_cm",
    ]
    assert {d.permissions for d in second.devices} == {"rw"}
    assert dict(first.envs) == {"ERDMA_DEVICES": "erdma_0", "SMCR_PNET": "00163E2F3775"}


async def test_allocate_all_devices(start_node):
    node = await start_node("default", "--allocate-all-devices")
    await node.wait_registered(ERDMA)
    response = await node.kubelet.allocate(ERDMA, ["erdma_1/2"])
    assert dict(response.container_responses[0].envs)["ERDMA_DEVICES"] == "erdma_0,erdma_1"


async def test_unknown_ids_get_an_error_naming_them(start_node):
    node = await start_node()
    await node.wait_registered(ERDMA)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await node.kubelet.allocate(ERDMA, ["erdma_7/0", "erdma_0/0"])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "erdma_7/0" in (err.value.details() or "")
    empty = await node.kubelet.allocate(ERDMA, [])
    assert list(empty.container_responses) == []


async def test_local_mode_exposes_the_selected_devices(start_node):
    node = await start_node(
        "default", "--local-eri-discovery", "--exposed-local-eris", "i-* erdma_1"
    )
    await node.wait_registered(ERDMA)
    assert sorted(latest(node)) == ["erdma_1/0", "erdma_1/1", "erdma_1/2", "erdma_1/3"]


async def test_local_mode_bad_entry_fails_at_start_quoting_it(start_node):
    node = await start_node(
        "default", "--local-eri-discovery", "--exposed-local-eris", "i-abc erdma_0 erdma_1"
    )
    assert node.process is not None
    code = await asyncio.wait_for(node.process.wait(), 20)
    assert code == 2
    assert "'i-abc erdma_0 erdma_1' is invalid" in node.agent_log()
    assert "<instance-id|i-*> <device>" in node.agent_log()


async def test_driver_loaded_late_devices_appear(start_node):
    node = await start_node("driver-not-loaded")
    await node.wait_registered(ERDMA)
    assert latest(node) == {}
    node.host.load_driver(fakehost.erdma_node())
    await node.kubelet.wait_for(lambda: len(latest(node)) == 8, 30, "devices after driver load")


async def test_metrics_count_registrations_allocations_and_health(start_node):
    port = free_port()
    node = await start_node("default", "--metrics-port", str(port))
    await node.wait_registered(ERDMA)
    await node.kubelet.allocate(ERDMA, ["erdma_1/0"])
    node.host.set_port_state("erdma_0", False)
    await node.kubelet.wait_for(lambda: latest(node).get("erdma_0/0") == "Unhealthy", 30)
    url = f"http://127.0.0.1:{port}/metrics"
    text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
    assert 'erdma_deviceplugin_registrations_total{resource="aliyun/erdma",result="ok"} 1.0' in text
    assert 'erdma_agent_allocations_total{device="erdma_1",resource="aliyun/erdma"} 1.0' in text
    assert 'erdma_deviceplugin_devices{health="Unhealthy",resource="aliyun/erdma"} 4.0' in text
    assert "erdma_deviceplugin_rpc_duration_seconds_count" in text
    assert "erdma_agent_scan_duration_seconds_count" in text


def test_agent_logs_are_json_lines(short_root: Path):
    import json
    import subprocess

    fakehost.build(short_root / "host", "default")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "erdma",
            "agent",
            "--host-root",
            str(short_root / "host"),
            "--prefer-driver",
            "turbo",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert (
        "preferDriver (--prefer-driver)='turbo'" in proc.stderr
        and "'default', 'compat' or 'ofed'" in proc.stderr
    )
    line = json.dumps({"ok": True})
    assert json.loads(line)["ok"]


async def test_cdi_strategy_writes_the_spec_and_answers_with_cdi_names(start_node, short_root):
    cdi_dir = short_root / "cdi"
    node = await start_node(
        "default", "--device-list-strategy", "cdi-cdi-devices", "--cdi-spec-dir", str(cdi_dir)
    )
    await node.wait_registered(ERDMA)
    spec = (cdi_dir / "aliyun.com-erdma.yaml").read_text()
    assert "kind: aliyun.com/erdma" in spec and "/dev/infiniband/rdma_cm" in spec
    response = await node.kubelet.allocate(ERDMA, ["erdma_1/0"])
    container = response.container_responses[0]
    assert [d.name for d in container.cdi_devices] == ["aliyun.com/erdma=erdma_1"]
    assert list(container.devices) == []


async def test_bad_device_list_strategy_is_refused_at_start(start_node):
    node = await start_node("default", "--device-list-strategy", "envvar")
    assert node.process is not None
    assert await asyncio.wait_for(node.process.wait(), 20) == 2
    assert "deviceListStrategy (--device-list-strategy)='envvar'" in node.agent_log()
    assert "'device-specs', 'cdi-cdi-devices' or 'cdi-annotations'" in node.agent_log()


async def test_unwritable_cdi_dir_is_logged_and_health_still_flows(start_node, short_root):
    blocker = short_root / "not-a-dir"
    blocker.write_text("")
    node = await start_node(
        "default", "--device-list-strategy", "cdi-cdi-devices", "--cdi-spec-dir", str(blocker)
    )
    await node.wait_registered(ERDMA)
    node.host.set_port_state("erdma_0", False)
    await node.kubelet.wait_for(lambda: latest(node).get("erdma_0/0") == "Unhealthy", 30)
    assert "cannot write the CDI spec" in node.agent_log()
    assert node.process is not None and node.process.returncode is None


async def test_hot_added_device_is_advertised(start_node):
    node = await start_node()
    await node.wait_registered(ERDMA)
    netdev = fakehost.FakeNetdev("eth3", "00:16:3e:2f:40:01", "0000:81:06.0")
    device = fakehost.FakeRdma("erdma_2", "0000:81:07.0", "eth3", numa=1, uverbs=2)
    node.host.add_device(netdev, device)
    await node.kubelet.wait_for(lambda: "erdma_2/3" in latest(node), 30, "erdma_2 advertised")
    assert node.capacity_by_numa(ERDMA) == {"0": (4, 4), "1": (8, 8)}


async def test_local_mode_reads_the_instance_id_from_metadata(start_node):
    from tests.fakes.ecs import EcsEmulator
    from tests.fakes.ecs.client import GENERAL_ERI, standard_world

    world = standard_world()
    instance = world.add_instance(GENERAL_ERI.name)
    with EcsEmulator(world).in_thread() as emu:
        emu.metadata_instance_id = instance.id
        node = await start_node(
            "default",
            "--local-eri-discovery",
            "--metadata-url",
            emu.metadata_url,
            "--exposed-local-eris",
            f"i-other erdma_0,{instance.id} erdma_1",
        )
        await node.wait_registered(ERDMA)
        await node.kubelet.wait_for(
            lambda: sorted(latest(node)) == [f"erdma_1/{i}" for i in range(4)],
            10,
            f"only erdma_1, chosen by this instance's entry; log:\n{node.agent_log()}",
        )
