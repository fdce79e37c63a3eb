"""DRA taints come from the health code, never from the words of the health message.

The scheduler and `kubectl get resourceslices` show the taint value; a message is for people
and may be reworded at any time, which must leave every taint (and the device plugin's
Healthy/Unhealthy) exactly as it was.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from erdma.agent.health import device_health
from erdma.dra import DraConfig
from erdma.dra.devices import HealthCheck, inventory, slice_devices
from erdma.host.devices import scan
from erdma.host.health import Health, HealthCode
from erdma.host.model import RdmaDevice
from erdma.sim import fakehost

TAINT = DraConfig(enabled=True, unhealthy="taint")


def taints(root, health: HealthCheck) -> dict[str, list[dict]]:
    devices = inventory(scan(root), TAINT, health=health, root_of=lambda a: None)
    return {e["name"]: e.get("taints", []) for e in slice_devices(devices, TAINT, "default")}


def reworded(device: RdmaDevice) -> Health:
    """The agent's verdict with every message written differently."""
    verdict = device_health(device)
    return replace(verdict, message=f"in other words: {verdict.message[::-1]}")


@pytest.mark.parametrize(
    ("break_it", "code"),
    [
        (lambda host: host.set_port_state("erdma_0", active=False), "LinkDown"),
        (lambda host: host.remove_node("/dev/infiniband/uverbs0"), "CharDeviceMissing"),
    ],
)
def test_rewording_a_message_keeps_the_taint(tmp_path, break_it, code):
    host = fakehost.build(tmp_path, "default")
    break_it(host)
    assert device_health(scan(host.root).erdma_devices[0]).code.value == code
    as_worded = taints(host.root, device_health)
    assert as_worded["erdma-0"] == [
        {"key": "erdma.aliyun.com/unhealthy", "value": code, "effect": "NoSchedule"}
    ]
    assert taints(host.root, reworded) == as_worded
    assert as_worded["erdma-1"] == []


def always(code: HealthCode) -> HealthCheck:
    def check(device: RdmaDevice) -> Health:
        return Health(code, "whatever the words")

    return check


def test_every_unhealthy_code_is_a_taint_value_and_healthy_is_none(tmp_path):
    host = fakehost.build(tmp_path, "default")
    for code in HealthCode:
        found = taints(host.root, always(code))
        values = {t["value"] for entries in found.values() for t in entries}
        assert values == (set() if code is HealthCode.HEALTHY else {code.value})
