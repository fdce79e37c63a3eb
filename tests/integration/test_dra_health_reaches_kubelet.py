"""Device health over the kubelet's DRAResourceHealth stream, read with a real gRPC client on
the driver's unix socket, as kubelet reads it (v1alpha1 on kubelet 1.34-1.36, v1 later).

The driver is fed rescans of a fixture host as the agent feeds it; what is checked is what
kubelet turns into `allocatedResourcesStatus`: pool and device names as in the ResourceSlice,
Healthy/Unhealthy following the port, Unknown for a device a prepared claim holds that the node
no longer publishes, and a list that keeps coming while rescans keep confirming it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import grpc
import pytest

from erdma.api.drahealth.v1 import api_pb2 as v1
from erdma.api.drahealth.v1 import api_pb2_grpc as v1_grpc
from erdma.api.drahealth.v1alpha1 import api_pb2 as v1alpha1
from erdma.api.drahealth.v1alpha1 import api_pb2_grpc as v1alpha1_grpc
from erdma.api.pluginregistration.v1 import api_pb2 as reg
from erdma.api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from erdma.dra import DraDriver
from erdma.dra.names import DRIVER_NAME, HEALTH_SERVICE_V1, HEALTH_SERVICE_V1ALPHA1, SERVICE_V1
from erdma.host.devices import scan
from erdma.sim import fakehost
from erdma.sim.dra_kubelet import FakeDraKubelet
from tests.integration.dra_support import ClaimStore, claim, new_driver
from tests.waiting import until

VERSIONS = {"v1alpha1": (v1alpha1, v1alpha1_grpc), "v1": (v1, v1_grpc)}
DEADLINE = 30.0  # bounds a hang only; a report normally follows a rescan at once


@pytest.fixture
def host(short_root: Path) -> fakehost.FakeHost:
    return fakehost.build(short_root / "host", "default")


async def stream(driver: DraDriver, version: str) -> AsyncGenerator[dict[str, tuple[str, Any]]]:
    """{device: (health name, DeviceHealth)} of each report on the driver's DRA socket."""
    pb, pb_grpc = VERSIONS[version]
    async with grpc.aio.insecure_channel(f"unix://{driver.dra_socket}") as channel:
        call = pb_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
            pb.NodeWatchResourcesRequest()
        )
        while True:
            answer = await asyncio.wait_for(call.read(), DEADLINE)
            assert answer is not grpc.aio.EOF, "the driver ended the health stream"
            yield {
                d.device.device_name: (pb.HealthStatus.Name(d.health), d) for d in answer.devices
            }


def health(report: dict[str, tuple[str, Any]]) -> dict[str, str]:
    return {name: status for name, (status, _) in report.items()}


async def test_registration_offers_the_health_stream_after_the_dra_services(short_root, host):
    async with new_driver(short_root, host, store=ClaimStore()) as driver:
        await until(driver.registration_socket.exists, what="the registration socket")
        path = f"unix://{driver.registration_socket}"
        async with grpc.aio.insecure_channel(path) as channel:
            info = await reg_grpc.RegistrationStub(channel).GetInfo(reg.InfoRequest(), timeout=10)
    offered = list(info.supported_versions)
    # kubelet takes the first DRAPlugin service it knows in this order: v1 stays first
    assert offered[0] == SERVICE_V1
    assert {HEALTH_SERVICE_V1, HEALTH_SERVICE_V1ALPHA1} <= set(offered)
    # the names kubelet matches are the gRPC service names themselves
    served = {m.DESCRIPTOR.services_by_name["DRAResourceHealth"].full_name for m in (v1, v1alpha1)}
    assert served == {HEALTH_SERVICE_V1, HEALTH_SERVICE_V1ALPHA1}


@pytest.mark.parametrize("version", sorted(VERSIONS))
async def test_port_down_streams_unhealthy_and_active_streams_healthy(short_root, host, version):
    async with new_driver(short_root, host, store=ClaimStore(), node="node-a") as driver:
        reports = stream(driver, version)
        first = await anext(reports)
        assert health(first) == {"erdma-0": "HEALTHY", "erdma-1": "HEALTHY"}
        _, entry = first["erdma-1"]
        assert entry.device.pool_name == "node-a"  # the ResourceSlice's pool
        assert entry.last_updated_time > 0 and entry.health_check_timeout_seconds > 0

        host.set_port_state("erdma_1", active=False)
        driver.publish(scan(host.root))
        down = await anext(reports)
        assert health(down) == {"erdma-0": "HEALTHY", "erdma-1": "UNHEALTHY"}
        assert "DOWN" in down["erdma-1"][1].message

        host.set_port_state("erdma_1", active=True)
        driver.publish(scan(host.root))
        assert health(await anext(reports)) == {"erdma-0": "HEALTHY", "erdma-1": "HEALTHY"}
        await reports.aclose()


async def test_a_claimed_device_the_node_stops_publishing_is_unknown(short_root, host):
    store = ClaimStore()
    ref = store.add(claim("nic", "node-a", [("nic", "erdma-1")]))
    async with (
        FakeDraKubelet(short_root / "kubelet") as kubelet,
        new_driver(short_root, host, store=store, node="node-a") as driver,
    ):
        await kubelet.wait_registered(DRIVER_NAME)
        await kubelet.prepare(DRIVER_NAME, [ref])
        reports = stream(driver, "v1alpha1")
        assert health(await anext(reports)) == {"erdma-0": "HEALTHY", "erdma-1": "HEALTHY"}

        driver.publish(scan(host.root), exposed={"erdma_0"})  # erdma_1 withdrawn
        withdrawn = await anext(reports)
        assert health(withdrawn) == {"erdma-0": "HEALTHY", "erdma-1": "UNKNOWN"}
        assert "prepared claim" in withdrawn["erdma-1"][1].message

        await kubelet.unprepare(DRIVER_NAME, [ref])
        driver.publish(scan(host.root), exposed={"erdma_0"})
        assert health(await anext(reports)) == {"erdma-0": "HEALTHY"}
        await reports.aclose()


async def test_an_unchanged_list_keeps_coming_while_rescans_confirm_it(short_root, host):
    async with new_driver(short_root, host, store=ClaimStore()) as driver:
        driver.health_board.resend = 0.2

        async def rescans() -> None:
            while True:
                driver.publish(scan(host.root))
                await asyncio.sleep(0.05)

        agent = asyncio.create_task(rescans())
        try:
            reports = stream(driver, "v1")
            first, second = await anext(reports), await anext(reports)
            assert health(first) == health(second) == {"erdma-0": "HEALTHY", "erdma-1": "HEALTHY"}
            await reports.aclose()
        finally:
            agent.cancel()
