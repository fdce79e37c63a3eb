"""A health change reaches the kubelet's stream at once, even one that happens while the
previous report is still going out (the stream is suspended handing it over): it must not sit
until the next periodic resend, which is tens of seconds away."""

from __future__ import annotations

import asyncio

from erdma.agent.health import device_health
from erdma.dra import DraConfig
from erdma.dra.devices import inventory
from erdma.dra.health_board import HealthBoard, Status
from erdma.host.devices import scan
from erdma.sim import fakehost

NEVER = 3600.0  # no periodic resend within the test: only the change itself can wake it


def devices(host: fakehost.FakeHost):
    return inventory(
        scan(host.root), DraConfig(enabled=True), health=device_health, root_of=lambda a: None
    )


async def test_a_change_while_a_report_goes_out_is_sent_next(tmp_path):
    host = fakehost.build(tmp_path, "default")
    board = HealthBoard("node-a", resend=NEVER)
    board.update(devices(host), [])
    reports = board.watch()
    first = await anext(reports)
    assert {d.device: d.status for d in first.devices} == {
        "erdma-0": Status.HEALTHY,
        "erdma-1": Status.HEALTHY,
    }
    host.set_port_state("erdma_1", active=False)
    board.update(devices(host), [])  # the stream still holds `first`
    second = await asyncio.wait_for(anext(reports), 30)
    assert {d.device: d.status for d in second.devices}["erdma-1"] is Status.UNHEALTHY
    await reports.aclose()
