"""Host pnet table management against the stand-in SMC kernel (netlink and smc_pnet paths)."""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path

import pytest

from erdma.host import smc
from erdma.host.netlink import core
from erdma.host.netlink.smc_pnet import PnetClient, PnetEntry
from erdma.host.run import RecordingRunner
from tests.fakes.smckernel import FakeSmcKernel


@dataclass(frozen=True)
class Device:
    name: str
    pnetid: str | None


@pytest.fixture
def host_root(tmp_path: Path) -> Path:
    (tmp_path / "sys/module/smc").mkdir(parents=True)
    return tmp_path


def netlink(kernel: FakeSmcKernel) -> smc.NetlinkPnet:
    return smc.NetlinkPnet(transport_factory=kernel.genl_transport)


def command(kernel: FakeSmcKernel) -> tuple[smc.CommandPnet, RecordingRunner]:
    runner = RecordingRunner(handlers=[kernel.smc_pnet])
    return smc.CommandPnet(runner), runner


async def test_host_setup_gives_each_device_port_its_pnetid_once(host_root):
    kernel = FakeSmcKernel(ib_devices=("erdma_0", "erdma_1"))
    devices = [Device("erdma_0", "00163E2F3775"), Device("erdma_1", "00163e2f3776")]

    first = await smc.ensure_host_pnet(netlink(kernel), devices, host_root)
    second = await smc.ensure_host_pnet(netlink(kernel), devices, host_root)

    assert kernel.port_pnetids == {("erdma_0", 1): "00163E2F3775", ("erdma_1", 1): "00163E2F3776"}
    assert len(first.added) == 2
    assert (second.added, len(second.present)) == ([], 2)
    assert [op for _ns, op in kernel.requests].count("ADD") == 2


async def test_device_without_pnetid_is_skipped_not_fatal(host_root):
    kernel = FakeSmcKernel()
    report = await smc.ensure_host_pnet(netlink(kernel), [Device("erdma_0", None)], host_root)
    assert (report.added, report.present, kernel.port_pnetids) == ([], [], {})


async def test_host_without_smc_module_says_so(tmp_path):
    with pytest.raises(smc.SmcUnavailable, match=r"sys/module/smc is absent.*modprobe smc"):
        await smc.ensure_host_pnet(netlink(FakeSmcKernel()), [Device("erdma_0", "A")], tmp_path)


async def test_missing_family_falls_back_to_the_command_which_also_reports_it(host_root):
    kernel = FakeSmcKernel(smc_loaded=False)
    backend = smc.FallbackPnet(netlink(kernel), command(kernel)[0])
    with pytest.raises(smc.SmcUnavailable) as info:
        await smc.ensure_host_pnet(backend, [Device("erdma_0", "ABC")], host_root)
    assert "'SMC_PNETID' is not registered" in str(info.value)
    assert "SMC module not loaded" in str(info.value)


async def test_netlink_refused_uses_smc_pnet_command():
    kernel = FakeSmcKernel()

    def no_netlink():
        raise PermissionError(1, "netlink socket refused")

    cmd, runner = command(kernel)
    backend = smc.FallbackPnet(smc.NetlinkPnet(transport_factory=no_netlink), cmd)

    await smc.ensure_entries(backend, [PnetEntry("ABC", ibname="erdma_0")])

    assert runner.calls == [
        ("smc_pnet", "-s"),
        ("smc_pnet", "-a", "ABC", "-D", "erdma_0", "-P", "1"),
    ]
    assert kernel.port_pnetids == {("erdma_0", 1): "ABC"}


@pytest.mark.parametrize("backend_kind", ["netlink", "command"])
async def test_matching_is_on_whole_fields_not_substrings(backend_kind):
    kernel = FakeSmcKernel()
    kernel.add(kernel.init_netns, "ABCD", "eth01", None, 1)
    backend = netlink(kernel) if backend_kind == "netlink" else command(kernel)[0]

    report = await smc.ensure_entries(backend, [PnetEntry("ABC", ethname="eth0")])

    assert report.added == [PnetEntry("ABC", ethname="eth0")]
    assert PnetEntry("ABC", ethname="eth0") in kernel.dump(kernel.init_netns)


async def test_lower_case_pnetid_matches_the_upper_cased_kernel_row():
    kernel = FakeSmcKernel()
    wanted = [PnetEntry("00163e2f3775", ethname="eth0")]
    await smc.ensure_entries(netlink(kernel), wanted)
    again = await smc.ensure_entries(netlink(kernel), wanted)
    assert again.present == [PnetEntry("00163E2F3775", ethname="eth0")]
    assert kernel.dump(kernel.init_netns) == [PnetEntry("00163E2F3775", ethname="eth0")]


async def test_netdev_held_under_another_pnetid_is_a_conflict_not_an_overwrite():
    kernel = FakeSmcKernel()
    kernel.add(kernel.init_netns, "OTHER", "eth0", None, 1)
    report = await smc.ensure_entries(netlink(kernel), [PnetEntry("ABC", ethname="eth0")])
    assert report.added == []
    assert report.conflicts == ["wanted `ABC eth0 n/a 255`, table has `OTHER eth0 n/a 255`"]


@pytest.mark.parametrize("backend_kind", ["netlink", "command"])
async def test_hardware_pnetid_refusal_is_reported_as_conflict(backend_kind):
    kernel = FakeSmcKernel(hardware_pnetids={"eth0": "HW1"})
    backend = netlink(kernel) if backend_kind == "netlink" else command(kernel)[0]
    report = await smc.ensure_entries(backend, [PnetEntry("ABC", ethname="eth0")])
    assert report.added == []
    assert "EEXIST" in report.conflicts[0]


@pytest.mark.parametrize("value", ["", "0016-3E2F3775", "00163E2F37750000X", "ÄBC"])
async def test_invalid_pnetid_names_the_value_and_the_rule(value):
    with pytest.raises(ValueError, match=r"invalid PNETID .*1-16 letters or digits"):
        await smc.ensure_entries(netlink(FakeSmcKernel()), [PnetEntry(value, ethname="eth0")])


def test_smc_pnet_show_output_is_parsed_per_field():
    text = "ABC encf500 n/a 255\nABC n/a 0001:00:00.0 2\nSMC module not loaded\n"
    assert smc.parse_show(text) == [
        PnetEntry("ABC", ethname="encf500"),
        PnetEntry("ABC", ibname="0001:00:00.0", ibport=2),
    ]


def test_delete_and_flush_clear_rows_and_device_port_pnetids():
    kernel = FakeSmcKernel(ib_devices=("erdma_0", "erdma_1"))
    with core.opened(kernel.genl_transport) as transport:
        client = PnetClient(transport)
        client.add(PnetEntry("AAA", ibname="erdma_0"))
        client.add(PnetEntry("BBB", ethname="eth1", ibname="erdma_1"))

        client.delete("aaa")
        assert kernel.port_pnetids == {("erdma_1", 1): "BBB"}
        assert client.dump() == [
            PnetEntry("BBB", ethname="eth1"),
            PnetEntry("BBB", ibname="erdma_1", ibport=1),
        ]

        client.flush()
        assert (client.dump(), kernel.port_pnetids) == ([], {})
        with pytest.raises(core.NetlinkError) as info:
            client.delete("AAA")
        assert info.value.code == errno.ENOENT


def test_unknown_rdma_device_is_refused_with_eexist_like_the_kernel():
    kernel = FakeSmcKernel()
    with core.opened(kernel.genl_transport) as transport, pytest.raises(core.NetlinkError) as info:
        PnetClient(transport).add(PnetEntry("AAA", ibname="mlx5_9"))
    assert info.value.code == errno.EEXIST
