"""The published device list: names, attributes, withdraw/taint and consumable capacity."""

from __future__ import annotations

import pytest

from erdma.agent.health import device_health
from erdma.dra import DraConfig
from erdma.dra.devices import DeviceNameError, dra_device_name, inventory, slice_devices
from erdma.host.devices import scan
from erdma.sim import fakehost


def listed(root, config, mode="default", exposed=None):
    devices = inventory(
        scan(root), config, health=device_health, root_of=lambda a: f"root-of-{a}", exposed=exposed
    )
    return {d["name"]: d for d in slice_devices(devices, config, mode)}


def test_names_are_dns_labels():
    assert dra_device_name("erdma_0") == "erdma-0" and dra_device_name("mlx5_1") == "mlx5-1"
    with pytest.raises(DeviceNameError, match="is not a DNS label"):
        dra_device_name("-bad_")


def test_mlx5_hcas_only_when_asked_for_and_without_driver_mode(tmp_path):
    host = fakehost.build(tmp_path, "mlx5")
    assert sorted(listed(host.root, DraConfig(enabled=True))) == ["erdma-0", "erdma-1"]
    both = listed(host.root, DraConfig(enabled=True, device_kinds=["erdma", "mlx5"]), "compat")
    assert both["mlx5-0"]["attributes"]["kind"] == {"string": "mlx5"}
    assert "driverMode" not in both["mlx5-0"]["attributes"]
    assert both["erdma-0"]["attributes"]["driverMode"] == {"string": "compat"}


def test_exposure_limits_erdma_devices_as_the_device_plugin_does(tmp_path):
    host = fakehost.build(tmp_path, "default")
    assert sorted(listed(host.root, DraConfig(enabled=True), exposed={"erdma_1"})) == ["erdma-1"]


def test_withdraw_or_taint_with_a_label_valued_reason(tmp_path):
    host = fakehost.build(tmp_path, "default")
    host.remove_node("/dev/infiniband/uverbs0")
    assert sorted(listed(host.root, DraConfig(enabled=True))) == ["erdma-1"]
    tainted = listed(host.root, DraConfig(enabled=True, unhealthy="taint"))
    assert tainted["erdma-0"]["taints"] == [
        {"key": "erdma.aliyun.com/unhealthy", "value": "CharDeviceMissing", "effect": "NoSchedule"}
    ]
    assert tainted["erdma-0"]["attributes"]["pciAddress"] == {"string": "0000:00:07.0"}
    assert tainted["erdma-0"]["attributes"]["resource.kubernetes.io/pcieRoot"] == {
        "string": "root-of-0000:00:07.0"
    }


def test_no_numa_affinity_leaves_the_attribute_out(tmp_path):
    host = fakehost.build(tmp_path, "no-numa")
    assert "numaNode" not in listed(host.root, DraConfig(enabled=True))["erdma-0"]["attributes"]
