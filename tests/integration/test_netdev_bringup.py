"""Secondary ERI netdev bring-up in a real network namespace, a veth standing in for the ERI
(the namespace is described in conftest_netns)."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from erdma.agent.regular import prepare_regular_mode
from erdma.host.metadata import EniNetwork, MetadataClient, MetadataError
from erdma.host.netdev import NetdevError, configure_eri_netdev
from erdma.kube import crd
from erdma.kube.client import KubeApi, new_client
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GPU_TWO_CARDS, standard_world
from tests.integration.netns_support import MAC, NEEDS_NETNS, ip, ipj, link, path, routes_via
from tests.waiting import until

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_netns"]

pytestmark = NEEDS_NETNS

NET = EniNetwork(mac=MAC, address="10.1.2.7", prefix_len=24, gateway="10.1.2.253")


def test_configures_address_routes_and_mtu(netns):
    result = configure_eri_netdev(MAC, NET, mtu=8500, netns=path(netns))

    assert (result.ifname, result.action) == ("eri0", "configured")
    info = link(netns, "eri0")
    assert "UP" in info["flags"]
    assert info["mtu"] == 8500
    addrs = ipj(netns, "addr", "show", "dev", "eri0")[0]["addr_info"]
    assert {"local": "10.1.2.7", "prefixlen": 24} in [
        {"local": a["local"], "prefixlen": a["prefixlen"]} for a in addrs if a["family"] == "inet"
    ]
    routes = routes_via(netns, "eri0")
    # the kernel's automatic prefix route (metric 0, proto kernel) is gone
    assert not [r for r in routes if r.get("protocol") == "kernel"]
    subnet = [r for r in routes if r["dst"] == "10.1.2.0/24"]
    assert len(subnet) == 1 and subnet[0]["scope"] == "link" and subnet[0]["metric"] == 200
    default = [r for r in routes if r["dst"] == "default"]
    # never outranks the primary's default route (metric 300): max + 1
    assert default == [{**default[0], "gateway": "10.1.2.253", "metric": 301}]
    assert (result.subnet_metric, result.default_metric) == (200, 301)
    # the primary interface's routes are untouched
    assert [r["metric"] for r in routes_via(netns, "eth0") if r["dst"] == "default"] == [300]


def test_no_jumbo_frame_keeps_mtu(netns):
    configure_eri_netdev(MAC, NET, mtu=None, netns=path(netns))
    assert link(netns, "eri0")["mtu"] == 1500


def test_second_run_changes_nothing(netns):
    configure_eri_netdev(MAC, NET, mtu=8500, netns=path(netns))
    before = ipj(netns, "route", "show"), ipj(netns, "addr", "show", "dev", "eri0")

    again = configure_eri_netdev(MAC, NET, mtu=8500, netns=path(netns))

    assert again.action == "already-up"
    assert (ipj(netns, "route", "show"), ipj(netns, "addr", "show", "dev", "eri0")) == before


async def test_rerun_after_carrier_loss_does_not_duplicate_routes(netns):
    """Link admin-up but carrier down (operstate not UP): configuration runs again, safely."""
    configure_eri_netdev(MAC, NET, mtu=None, netns=path(netns))
    ip(netns, "link", "set", "eri0p", "down")
    # the kernel updates operstate after the carrier change, from a work queue: wait for it
    await until(lambda: link(netns, "eri0")["operstate"] != "UP", what="eri0 to lose carrier")

    result = configure_eri_netdev(MAC, NET, mtu=None, netns=path(netns))

    assert result.action == "configured"
    routes = routes_via(netns, "eri0")
    assert sorted((r["dst"], r["metric"]) for r in routes) == [
        ("10.1.2.0/24", 200),
        ("default", 301),
    ]


def test_already_up_with_address_is_left_alone(netns, caplog):
    ip(netns, "link", "set", "eri0", "up")
    ip(netns, "addr", "add", "10.9.9.9/24", "dev", "eri0")

    result = configure_eri_netdev(MAC, NET, mtu=8500, netns=path(netns))

    assert result.action == "already-up"
    assert link(netns, "eri0")["mtu"] == 8500  # jumbo MTU is still applied
    assert not [r for r in routes_via(netns, "eri0") if r["dst"] == "default"]
    addrs = [a["local"] for a in ipj(netns, "addr", "show", "dev", "eri0")[0]["addr_info"]]
    assert "10.1.2.7" not in addrs
    assert "not with the VPC address 10.1.2.7" in caplog.text


def test_failure_sets_link_down_and_names_the_step(netns):
    unreachable = EniNetwork(mac=MAC, address="10.1.2.7", prefix_len=24, gateway="192.168.50.1")

    with pytest.raises(NetdevError) as err:
        configure_eri_netdev(MAC, unreachable, netns=path(netns))

    assert "eri0 (00:16:3e:aa:bb:01): add default route via 192.168.50.1 failed" in str(err.value)
    assert "link set down" in str(err.value)
    assert "UP" not in link(netns, "eri0")["flags"]


def test_unknown_mac_is_a_clear_error(netns):
    with pytest.raises(NetdevError, match="no network device with MAC 00:16:3e:00:00:99"):
        configure_eri_netdev("00:16:3e:00:00:99", NET, netns=path(netns))


async def test_agent_waits_for_ready_devices_then_brings_up_the_eri(kube_api, netns, caplog):
    """Regular mode: the agent watches the ERdmaDevice (created late, Pending first), then
    configures the secondary ERI with the address the metadata service reports for its MAC."""
    caplog.set_level(logging.INFO, logger="erdma.agent.regular")
    world = standard_world()
    inst = world.add_instance(GPU_TWO_CARDS.name, jumbo_frame=True)
    eri = world.add_attached_eni(inst, 1, traffic_mode="HighPerformance", queue_pair_number=16)
    ip(netns, "link", "set", "eri0", "address", eri.mac)
    node = f"node-{uuid.uuid4().hex[:8]}"
    devices = [
        crd.DeviceInfo(inst.primary_eni_id, world.enis[inst.primary_eni_id].mac, inst.id, 0, True),
        crd.DeviceInfo(eri.id, eri.mac, inst.id, 1),
    ]
    kube = KubeApi(new_client(kube_api.kubeconfig))
    with EcsEmulator(world).in_thread() as emu:
        agent = asyncio.create_task(
            prepare_regular_mode(kube, node, MetadataClient(emu.metadata_url), netns=path(netns))
        )
        try:
            await asyncio.sleep(0.5)  # no object yet: the agent keeps waiting, no crash
            assert not agent.done()
            await kube.create_device(crd.build(node, "uid-1", inst.id, devices, jumbo_frame=True))
            pending = [crd.DeviceStatus(d.id, crd.PENDING, "attaching") for d in devices]
            await kube.patch_device_status(node, crd.status_body(pending))
            for _ in range(100):  # until the agent has seen (and logged) the Pending status
                if "Pending: attaching" in caplog.text:
                    break
                await asyncio.sleep(0.1)
            assert not agent.done()
            assert "UP" not in link(netns, "eri0")["flags"]

            ready = [crd.DeviceStatus(d.id, crd.READY) for d in devices]
            await kube.patch_device_status(node, crd.status_body(ready))
            dev = await asyncio.wait_for(agent, timeout=20)
        finally:
            agent.cancel()
            await kube.delete_device(node)
            await kube.close()

    assert dev.all_ready and dev.jumbo_frame
    assert f"0/2 Ready; {inst.primary_eni_id} Pending: attaching" in caplog.text
    info = link(netns, "eri0")
    assert "UP" in info["flags"] and info["mtu"] == 8500
    addrs = [a["local"] for a in ipj(netns, "addr", "show", "dev", "eri0")[0]["addr_info"]]
    assert eri.private_ip in addrs
    default = [r for r in routes_via(netns, "eri0") if r["dst"] == "default"]
    assert [(r["gateway"], r["metric"]) for r in default] == [("10.0.0.1", 301)]


async def test_metadata_names_the_missing_path():
    world = standard_world()
    world.add_instance(GPU_TWO_CARDS.name)
    with EcsEmulator(world).in_thread() as emu:
        client = MetadataClient(emu.metadata_url, attempts=2, backoff=0.01)
        assert await client.region_id() == "cn-hangzhou"
        with pytest.raises(MetadataError, match=r"network/interfaces/macs/00:16:3e:00:00:99/.*404"):
            await client.eni_network("00:16:3e:00:00:99")
