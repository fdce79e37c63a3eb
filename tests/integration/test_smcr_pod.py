"""SMC-R in a pod's network namespace through PreStartContainer (path 1), end to end.

Real network namespaces (`ip netns add`), real gRPC over unix sockets to a fake pod-resources
server and a fake CRI runtime. The kernel here has no SMC, so `net.smc.*` comes from a fixture
tree and the pnet tables from the stand-in kernel, which keys them by the namespace of the
thread talking to it; `disable_ipv6` is the real knob of the real pod namespace.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry

from erdma.agent.erdma import ErdmaPlugin, ErdmaPolicy
from erdma.agent.smcr import PodNetnsSteps, SmcrConfigurator
from erdma.api.names import SMCR_ANNOTATION
from erdma.api.smcr import SmcrError
from erdma.deviceplugin.manager import PluginManager
from erdma.host.devices import scan
from erdma.host.netlink.smc_diag import SmcSocket
from erdma.host.netlink.smc_pnet import PnetEntry
from erdma.host.netns import netns_id
from erdma.host.run import RecordingRunner
from erdma.host.smc import CommandPnet, FallbackPnet, NetlinkPnet
from erdma.host.sysctl import Sysctls
from erdma.sim import fakehost
from erdma.tools.smc import SmcAccess, smc_group
from tests.fakes.cri import FakeCri, FakeSandbox
from tests.fakes.podresources import (
    AssignedDevices,
    ContainerAssignment,
    FakePodResources,
    PodAssignment,
)
from tests.fakes.smckernel import FakeSmcKernel

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create network namespaces"),
]

PNETID = "00163E2F3775"
DEVICE_IDS = ["erdma_0-7", "erdma_0-8"]
HOST_IPV6 = Path("/proc/sys/net/ipv6/conf/all/disable_ipv6")


@pytest.fixture
def pod_netns() -> Iterator[str]:
    name = f"erdma-smcr-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield f"/var/run/netns/{name}"
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def ns_sysctl(netns: str, key: str) -> str:
    out = subprocess.run(
        ["ip", "netns", "exec", Path(netns).name, "sysctl", "-n", key],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def smc_proc(root: Path, tcp2smc: bool = True) -> Path:
    """A proc tree with the alinux3 (tcp2smc=0) or alinux4 (no tcp2smc) net.smc profile."""
    smc = root / "sys/net/smc"
    smc.mkdir(parents=True)
    if tcp2smc:
        (smc / "tcp2smc").write_text("0\n")
        (smc / "limit_handshake").write_text("0\n")
    else:
        (smc / "limit_smc_hs").write_text("1\n")
        (smc / "smcr_buf_type").write_text("2\n")
    return root


@dataclass
class Node:
    configurator: SmcrConfigurator
    cri: FakeCri
    pods: FakePodResources
    kernel: FakeSmcKernel
    smc_proc: Path

    def tcp2smc(self) -> str:
        return (self.smc_proc / "sys/net/smc/tcp2smc").read_text().strip()

    def pod_table(self, netns: str) -> list[PnetEntry]:
        return self.kernel.dump(netns_id(netns))


def sandbox(netns: str | None, value: str | None, host_network: bool = False) -> FakeSandbox:
    annotations = {} if value is None else {SMCR_ANNOTATION: value}
    return FakeSandbox(
        id="sb1",
        namespace="team",
        name="trainer-0",
        netns_path=netns,
        host_network=host_network,
        annotations=annotations,
    )


@asynccontextmanager
async def make_node(kubelet_root: Path, tcp2smc: bool = True) -> AsyncIterator[Node]:
    pod = PodAssignment(
        "team",
        "trainer-0",
        (ContainerAssignment("main", (AssignedDevices("aliyun/erdma", tuple(DEVICE_IDS)),)),),
    )
    kernel = FakeSmcKernel()
    proc = smc_proc(kubelet_root / "smcproc", tcp2smc)
    steps = PodNetnsSteps(
        sysctls=Sysctls(Path("/proc"), {"net.smc": proc}),
        pnet_for=lambda ns: NetlinkPnet(ns, kernel.genl_transport),
    )
    async with (
        FakePodResources.for_kubelet_root(kubelet_root, [pod]) as pods,
        FakeCri(kubelet_root / "containerd.sock") as cri,
    ):
        configurator = SmcrConfigurator(
            steps, pod_resources_socket=pods.socket_path, runtime_socket=str(cri.socket_path)
        )
        yield Node(configurator, cri, pods, kernel, proc)


@pytest.fixture
async def node(kubelet_root: Path) -> AsyncIterator[Node]:
    async with make_node(kubelet_root) as made:
        yield made


def pnetid_of(device_id: str) -> str | None:
    return PNETID if device_id.startswith("erdma_0") else None


@pytest.mark.parametrize("value", ["true", "TRUE", "1", "t"])
async def test_annotated_pod_gets_tcp2smc_no_ipv6_and_its_eth0_pnet_row(node, pod_netns, value):
    host_ipv6 = HOST_IPV6.read_text()
    node.cri.sandboxes = [sandbox(pod_netns, value)]

    said = await node.configurator.configure(DEVICE_IDS, pnetid_of)

    assert "team/trainer-0: SMC-R on" in said
    assert node.tcp2smc() == "1"
    assert ns_sysctl(pod_netns, "net.ipv6.conf.all.disable_ipv6") == "1"
    assert HOST_IPV6.read_text() == host_ipv6
    assert node.pod_table(pod_netns) == [PnetEntry(PNETID, ethname="eth0")]
    assert node.kernel.dump(node.kernel.init_netns) == []


async def test_second_container_of_the_same_pod_changes_nothing(node, pod_netns):
    node.cri.sandboxes = [sandbox(pod_netns, "true")]
    await node.configurator.configure(DEVICE_IDS, pnetid_of)
    await node.configurator.configure(DEVICE_IDS, pnetid_of)
    assert [op for _ns, op in node.kernel.requests].count("ADD") == 1
    assert node.pod_table(pod_netns) == [PnetEntry(PNETID, ethname="eth0")]


@pytest.mark.parametrize("value", [None, "false", "0", "False"])
async def test_pod_without_a_true_annotation_is_left_alone(node, pod_netns, value):
    node.cri.sandboxes = [sandbox(pod_netns, value)]
    said = await node.configurator.configure(DEVICE_IDS, pnetid_of)
    assert "SMC-R not requested" in said
    assert node.tcp2smc() == "0"
    assert ns_sysctl(pod_netns, "net.ipv6.conf.all.disable_ipv6") == "0"
    assert node.kernel.requests == []


@pytest.mark.parametrize("value", ["yes", "on", "tRuE", " true", ""])
async def test_garbage_annotation_fails_the_start_naming_value_and_choices(node, pod_netns, value):
    node.cri.sandboxes = [sandbox(pod_netns, value)]
    with pytest.raises(SmcrError) as info:
        await node.configurator.configure(DEVICE_IDS, pnetid_of)
    assert f"invalid value {value!r} for annotation {SMCR_ANNOTATION}" in str(info.value)
    assert "1, t, T, TRUE, true, True" in str(info.value)
    assert node.tcp2smc() == "0"


async def test_host_network_pod_is_skipped_even_when_annotated(node):
    host_ipv6 = HOST_IPV6.read_text()
    node.cri.sandboxes = [sandbox(None, "true", host_network=True)]
    said = await node.configurator.configure(DEVICE_IDS, pnetid_of)
    assert "hostNetwork" in said
    assert node.tcp2smc() == "0"
    assert HOST_IPV6.read_text() == host_ipv6
    assert node.kernel.requests == []


async def test_kernel_without_tcp2smc_fails_with_the_alinux4_message(kubelet_root, pod_netns):
    async with make_node(kubelet_root, tcp2smc=False) as node:
        node.cri.sandboxes = [sandbox(pod_netns, "true")]
        with pytest.raises(SmcrError, match=r"net.smc.tcp2smc unavailable.*Alibaba Cloud Linux 4"):
            await node.configurator.configure(DEVICE_IDS, pnetid_of)
        assert ns_sysctl(pod_netns, "net.ipv6.conf.all.disable_ipv6") == "0"
        assert node.kernel.requests == []


async def test_device_nobody_holds_is_an_error_naming_it(node):
    with pytest.raises(SmcrError, match="no pod holds aliyun/erdma device 'erdma_1-3'"):
        await node.configurator.configure(["erdma_1-3"], pnetid_of)


async def test_pod_without_ready_sandbox_is_an_error(node, pod_netns):
    node.cri.sandboxes = [FakeSandbox("old", "team", "trainer-0", pod_netns, ready=False)]
    with pytest.raises(SmcrError, match="no ready sandbox for pod team/trainer-0"):
        await node.configurator.configure(DEVICE_IDS, pnetid_of)


async def test_device_without_pnetid_fails_instead_of_half_configuring(node, pod_netns):
    node.cri.sandboxes = [sandbox(pod_netns, "true")]
    with pytest.raises(SmcrError, match="no PNETID known for devices erdma_0-7"):
        await node.configurator.configure(DEVICE_IDS, lambda _id: None)
    assert node.tcp2smc() == "0"


async def test_pod_table_is_separate_from_host_and_never_sees_device_rows(pod_netns):
    kernel = FakeSmcKernel()
    kernel.add(kernel.init_netns, PNETID, None, "erdma_0", 1)
    pod, host = (
        NetlinkPnet(pod_netns, kernel.genl_transport),
        NetlinkPnet(None, kernel.genl_transport),
    )

    await pod.add(PnetEntry(PNETID, ethname="eth0", ibname="erdma_0"))

    assert await pod.dump() == [PnetEntry(PNETID, ethname="eth0")]
    assert await host.dump() == [PnetEntry(PNETID, ibname="erdma_0", ibport=1)]


async def test_smc_pnet_command_fallback_runs_inside_the_pod_namespace(pod_netns, tmp_path):
    kernel = FakeSmcKernel(smc_loaded=True)
    runner = RecordingRunner(handlers=[kernel.smc_pnet])

    def broken_netlink():
        raise PermissionError(1, "netlink refused")

    steps = PodNetnsSteps(
        sysctls=Sysctls(Path("/proc"), {"net.smc": smc_proc(tmp_path)}),
        pnet_for=lambda ns: FallbackPnet(NetlinkPnet(ns, broken_netlink), CommandPnet(runner, ns)),
    )

    await steps.apply(pod_netns, PNETID.lower())

    assert runner.calls[-1] == (
        "nsenter",
        f"--net={pod_netns}",
        "--",
        "smc_pnet",
        "-a",
        PNETID,
        "-I",
        "eth0",
    )
    assert kernel.dump(netns_id(pod_netns)) == [PnetEntry(PNETID, ethname="eth0")]
    assert ns_sysctl(pod_netns, "net.ipv6.conf.all.disable_ipv6") == "1"


def test_smc_sockets_in_a_pod_namespace_lists_only_that_namespace(pod_netns):
    kernel = FakeSmcKernel()

    def connection(port: int, reason: int) -> SmcSocket:
        return SmcSocket(1, 1, 0, ("10.0.0.5", port), ("10.0.0.6", 1), 2, 0, 7, reason)

    kernel.sockets[kernel.init_netns] = [connection(22, 0x03010000)]
    kernel.sockets[netns_id(pod_netns)] = [connection(5201, 0x03030002)]
    access = SmcAccess(diag_transport=kernel.diag_transport)

    pod = CliRunner().invoke(smc_group, ["status", "--netns", pod_netns], obj=access)
    host = CliRunner().invoke(smc_group, ["sockets"], obj=access)

    assert pod.exit_code == 0, pod.output
    assert "0x03030002: no SMC-R device" in pod.output
    assert "0x03010000" not in pod.output
    assert "10.0.0.5:22" in host.output
    assert "5201" not in host.output


async def test_kubelet_prestart_through_the_erdma_plugin_configures_or_refuses(
    kubelet, kubelet_root, node, pod_netns
):
    """The whole path 1 over gRPC: kubelet PreStartContainer -> aliyun/erdma plugin -> pod."""
    fakehost.build(kubelet_root / "host", "default")
    plugin: ErdmaPlugin

    async def hook(ids):
        await node.configurator.prestart(ids, plugin.pnetid_of)

    plugin = ErdmaPlugin(ErdmaPolicy(slots_per_device=4), prestart=hook)
    plugin.update(scan(kubelet_root / "host"))
    slots = ["erdma_0/1", "erdma_0/2"]
    node.pods.pods = [
        PodAssignment(
            "team",
            "trainer-0",
            (ContainerAssignment("main", (AssignedDevices("aliyun/erdma", tuple(slots)),)),),
        )
    ]
    async with PluginManager([plugin], registry=CollectorRegistry(), kubelet_root=kubelet_root):
        await kubelet.wait_for(lambda: kubelet.registered("aliyun/erdma"), 5, "registered")

        node.cri.sandboxes = [sandbox(pod_netns, "yes")]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await kubelet.prestart("aliyun/erdma", slots)
        assert "invalid value 'yes' for annotation" in str(refused.value.details())

        node.cri.sandboxes = [sandbox(pod_netns, "true")]
        await kubelet.prestart("aliyun/erdma", slots)

    assert node.pod_table(pod_netns) == [PnetEntry("00163E2F3775", ethname="eth0")]
    assert ns_sysctl(pod_netns, "net.ipv6.conf.all.disable_ipv6") == "1"
