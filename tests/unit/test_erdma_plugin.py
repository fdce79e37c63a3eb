"""The `aliyun/erdma` policy: slots, health, Allocate contents, Local mode filtering."""

from __future__ import annotations

from pathlib import Path

import pytest

from erdma.agent.erdma import ErdmaPlugin, ErdmaPolicy
from erdma.agent.exposure import parse_rules, select
from erdma.deviceplugin.plugin import AllocationError, DeviceNode
from erdma.host.devices import scan
from erdma.sim import fakehost


def plugin_on(root: Path, variant: str = "default", **policy: object) -> ErdmaPlugin:
    fakehost.build(root, variant)
    plugin = ErdmaPlugin(ErdmaPolicy(**policy))  # type: ignore[arg-type]
    plugin.update(scan(root))
    return plugin


def test_two_hundred_slots_per_device_with_numa(tmp_path: Path):
    plugin = plugin_on(tmp_path)
    devices = plugin.devices()
    assert len(devices) == 400
    assert devices[0].id == "erdma_0/0" and devices[199].id == "erdma_0/199"
    assert {d.numa_nodes for d in devices if d.id.startswith("erdma_1/")} == {(1,)}
    assert all(d.healthy for d in devices)


def test_slot_count_is_configurable(tmp_path: Path):
    assert len(plugin_on(tmp_path, slots_per_device=3).devices()) == 6


def test_no_numa_affinity_leaves_topology_unset(tmp_path: Path):
    plugin = plugin_on(tmp_path, "no-numa")
    assert {d.numa_nodes for d in plugin.devices()} == {()}


def test_mlx5_hcas_are_not_erdma_slots(tmp_path: Path):
    plugin = plugin_on(tmp_path, "mlx5", slots_per_device=1)
    assert [d.id for d in plugin.devices()] == ["erdma_0/0", "erdma_1/0"]


def test_allocate_gives_uverbs_rdma_cm_and_env(tmp_path: Path):
    plugin = plugin_on(tmp_path)
    (alloc,) = plugin.allocate([["erdma_1/3", "erdma_1/4"]])
    assert alloc.devices == [
        DeviceNode("/dev/infiniband/uverbs1", "/dev/infiniband/uverbs1", "rw"),
        DeviceNode("/dev/infiniband/rdma_cm", "/dev/infiniband/rdma_cm", "rw"),
    ]
    assert alloc.envs == {"ERDMA_DEVICES": "erdma_1", "SMCR_PNET": "00163E2F3111"}


def test_uverbs_follow_ibdev_not_the_index(tmp_path: Path):
    plugin = plugin_on(tmp_path, "uverbs-swapped")
    (alloc,) = plugin.allocate([["erdma_0/0"]])
    assert alloc.devices[0].host_path == "/dev/infiniband/uverbs1"


def test_two_containers_in_one_request_each_get_their_devices(tmp_path: Path):
    plugin = plugin_on(tmp_path)
    first, second = plugin.allocate([["erdma_0/1"], ["erdma_0/2", "erdma_1/0"]])
    assert [d.host_path for d in first.devices] == [
        "/dev/infiniband/uverbs0",
        "/dev/infiniband/rdma_cm",
    ]
    assert [d.host_path for d in second.devices] == [
        "/dev/infiniband/uverbs0",
        "/dev/infiniband/uverbs1",
        "/dev/infiniband/rdma_cm",
    ]
    assert second.envs["ERDMA_DEVICES"] == "erdma_0,erdma_1"
    assert second.envs["SMCR_PNET"] == "00163E2F3775"  # the first allocated device, always


@pytest.mark.parametrize("mode", ["compat", "ofed"])
def test_no_rdma_cm_outside_default_mode(tmp_path: Path, mode: str):
    plugin = plugin_on(tmp_path, "compat", mode=mode)
    (alloc,) = plugin.allocate([["erdma_0/0"]])
    assert [d.host_path for d in alloc.devices] == ["/dev/infiniband/uverbs0"]


def test_no_rdma_cm_when_the_host_has_none(tmp_path: Path):
    plugin = plugin_on(tmp_path, "no-rdma-cm")
    (alloc,) = plugin.allocate([["erdma_0/0"]])
    assert [d.host_path for d in alloc.devices] == ["/dev/infiniband/uverbs0"]


def test_allocate_all_devices(tmp_path: Path):
    plugin = plugin_on(tmp_path, allocate_all=True)
    (alloc,) = plugin.allocate([["erdma_0/0"]])
    assert [d.host_path for d in alloc.devices] == [
        "/dev/infiniband/uverbs0",
        "/dev/infiniband/uverbs1",
        "/dev/infiniband/rdma_cm",
    ]


def test_unknown_ids_are_named_in_the_error(tmp_path: Path):
    plugin = plugin_on(tmp_path)
    with pytest.raises(AllocationError, match=r"\['erdma_9/0', 'bogus'\]"):
        plugin.allocate([["erdma_0/0", "erdma_9/0", "bogus"]])


def test_empty_requests_do_not_crash(tmp_path: Path):
    plugin = plugin_on(tmp_path)
    assert plugin.allocate([]) == []
    (alloc,) = plugin.allocate([[]])
    assert alloc.devices == [] and alloc.envs == {}


def test_port_down_turns_unhealthy_and_back(tmp_path: Path):
    host = fakehost.build(tmp_path, "default")
    plugin = ErdmaPlugin(ErdmaPolicy(slots_per_device=2))
    changes: list[int] = []
    plugin.add_change_listener(lambda: changes.append(1))
    plugin.update(scan(tmp_path))
    host.set_port_state("erdma_0", False)
    assert plugin.update(scan(tmp_path)) is True
    assert [(d.id, d.healthy) for d in plugin.devices()][:2] == [
        ("erdma_0/0", False),
        ("erdma_0/1", False),
    ]
    assert plugin.update(scan(tmp_path)) is False  # nothing new: no resend
    host.set_port_state("erdma_0", True)
    plugin.update(scan(tmp_path))
    assert all(d.healthy for d in plugin.devices())
    assert len(changes) == 3


def test_missing_uverbs_node_is_unhealthy(tmp_path: Path):
    host = fakehost.build(tmp_path, "default")
    host.remove_node("/dev/infiniband/uverbs1")
    plugin = ErdmaPlugin(ErdmaPolicy(slots_per_device=1))
    plugin.update(scan(tmp_path))
    assert [(d.id, d.healthy) for d in plugin.devices()] == [
        ("erdma_0/0", True),
        ("erdma_1/0", False),
    ]


def test_local_mode_exposes_only_the_selected_devices(tmp_path: Path):
    exposure = select(parse_rules(["i-* erdma_1"]), "i-abc")
    plugin = plugin_on(tmp_path, slots_per_device=1, exposure=exposure)
    assert [d.id for d in plugin.devices()] == ["erdma_1/0"]
    with pytest.raises(AllocationError):
        plugin.allocate([["erdma_0/0"]])


def test_preferred_allocation_prefers_the_gpu_numa_node(tmp_path: Path):
    root = tmp_path / "gpu"
    spec = fakehost.variant("gpu")
    spec = fakehost.HostSpec(
        netdevs=spec.netdevs,
        rdma=spec.rdma,
        compat_mode="Y",
        gpus=tuple((addr, 1) for addr, _ in spec.gpus),
    )
    fakehost.build(root, spec)
    plugin = ErdmaPlugin(ErdmaPolicy(mode="ofed", slots_per_device=5))
    plugin.update(scan(root))
    available = [d.id for d in plugin.devices()]
    assert plugin.preferred_allocation(available, [], 1) == ["erdma_1/0"]


def test_driver_loaded_late_fills_the_list(tmp_path: Path):
    host = fakehost.build(tmp_path, "driver-not-loaded")
    plugin = ErdmaPlugin(ErdmaPolicy(slots_per_device=1))
    plugin.update(scan(tmp_path))
    assert plugin.devices() == ()
    host.load_driver(fakehost.erdma_node())
    assert plugin.update(scan(tmp_path)) is True
    assert [d.id for d in plugin.devices()] == ["erdma_0/0", "erdma_1/0"]


def test_cdi_strategies_name_devices_instead_of_listing_nodes(tmp_path: Path):
    from erdma.cdi import DeviceListStrategy

    plugin = plugin_on(tmp_path, device_list_strategy=DeviceListStrategy.CDI_DEVICES)
    (alloc,) = plugin.allocate([["erdma_1/0", "erdma_0/2"]])
    assert alloc.cdi_devices == ["aliyun.com/erdma=erdma_0", "aliyun.com/erdma=erdma_1"]
    assert alloc.devices == [] and alloc.envs["ERDMA_DEVICES"] == "erdma_0,erdma_1"
    plugin = plugin_on(tmp_path / "b", device_list_strategy=DeviceListStrategy.CDI_ANNOTATIONS)
    (alloc,) = plugin.allocate([["erdma_1/0"]])
    assert alloc.annotations == {"cdi.k8s.io/erdma": "aliyun.com/erdma=erdma_1"}
    assert alloc.devices == [] and alloc.cdi_devices == []


def test_an_answer_follows_the_latest_scan_and_cdi_readiness(tmp_path: Path):
    """Allocate keeps each answer while rescans find the same devices: what it gives must still
    follow a host that changed (rdma_cm gone) and a CDI spec that became current."""
    from erdma.cdi import DeviceListStrategy

    host = fakehost.build(tmp_path, "default")
    ready = False
    plugin = ErdmaPlugin(
        ErdmaPolicy(device_list_strategy=DeviceListStrategy.CDI_DEVICES), cdi_ready=lambda: ready
    )
    plugin.update(scan(tmp_path))
    (before,) = plugin.allocate([["erdma_0/0"]])
    assert [d.host_path for d in before.devices][-1] == "/dev/infiniband/rdma_cm"
    plugin.update(scan(tmp_path))  # a rescan that finds the same host keeps the answer
    assert plugin.allocate([["erdma_0/3"]])[0] is before
    host.remove_node("/dev/infiniband/rdma_cm")
    plugin.update(scan(tmp_path))
    (after,) = plugin.allocate([["erdma_0/1"]])
    assert [d.host_path for d in after.devices] == ["/dev/infiniband/uverbs0"]
    ready = True
    (named,) = plugin.allocate([["erdma_0/2"]])
    assert named.cdi_devices == ["aliyun.com/erdma=erdma_0"] and named.devices == []
