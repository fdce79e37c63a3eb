"""A GPU node joins and its second ERI is attached while everything watches: the controller
converts the primary ENI and attaches a new ERI through the ECS emulator (the attach takes
1 s), the node's kernel shows the ERI once ECS has attached it (`tests.fakes.eri_hotplug`),
and the Regular-mode agent brings its netdev up in the node's own network namespace and gives
both cards to kubelet. Real API server, controller, SDK, netlink and kubelet gRPC; the fakes
are the cloud, the sysfs tree and kubelet."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from lightkube import AsyncClient

from erdma.agent.config import build_config
from erdma.agent.service import Agent
from erdma.kube import crd
from erdma.sim.kubelet import FakeKubelet
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GPU_TWO_CARDS, cloud_for
from tests.fakes.eri_hotplug import AttachedEri, NodeHardware, node_network, report_attaches
from tests.fakes.kubeapi import KubeApiServer
from tests.integration.controller_rig import running_controller
from tests.integration.controller_support import add_node, eventually, ready_device
from tests.integration.netns_support import NEEDS_NETNS, inet_addresses, link, routes_via

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]
pytestmark = NEEDS_NETNS

ERDMA = "aliyun/erdma"
ATTACH_SECONDS = 1.0


async def test_joining_gpu_node_gets_its_attached_eri_configured_and_exposed(
    kube_api: KubeApiServer, k8s: AsyncClient, emu: EcsEmulator, short_root: Path
) -> None:
    emu.world.transition_delay = ATTACH_SECONDS
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    network = node_network(emu.world, inst.id)
    hardware = NodeHardware(short_root / "host", f"erdma-t-{uuid.uuid4().hex[:8]}", network)
    hardware.create()
    plugged: list[AttachedEri] = []

    def plug(eri: AttachedEri) -> None:
        hardware.plug(eri)
        plugged.append(eri)

    async with running_controller(kube_api.kubeconfig, cloud_for(emu)):
        kubelet = FakeKubelet(short_root / "kubelet" / "device-plugins")
        await kubelet.start()
        stop = asyncio.Event()
        reporter = asyncio.create_task(report_attaches(emu.world, {inst.id}, plug))
        agent_task: asyncio.Task[None] | None = None
        try:
            node = await add_node(k8s, inst)
            settings = {
                "host_root": short_root / "host",
                "kubelet_dir": short_root / "kubelet",
                "node_name": node,
                "kubeconfig": str(kube_api.kubeconfig),
                "local_eri_discovery": False,
                "metrics_port": 0,
                "slots_per_device": 2,
                "metadata_url": emu.metadata_url_for(inst.id),
            }
            agent = Agent(build_config(environ={}, flags=settings), netns=hardware.netns)
            agent_task = asyncio.create_task(agent.run(stop))

            def both_cards() -> bool:
                if reporter.done():  # a failed hot-plug says so, rather than a 30 s timeout
                    reporter.result()
                return sorted(kubelet.latest(ERDMA) or {}) == [
                    "erdma_0/0",
                    "erdma_0/1",
                    "erdma_1/0",
                    "erdma_1/1",
                ]

            await kubelet.wait_for(both_cards, 30, "both cards exposed")
            obj = await eventually(lambda: ready_device(k8s, node))

            # the host saw the converted primary and the one ERI ECS attached, nothing else
            dev = crd.parse(obj)
            attached = next(d for d in dev.devices if not d.is_primary_eni)
            assert sorted((e.eni_id, e.primary) for e in plugged) == sorted(
                [(inst.primary_eni_id, True), (attached.id, False)]
            )
            # its netdev carries the VPC address from instance metadata, routed beside eth0's
            eri = emu.world.enis[attached.id]
            assert "UP" in link(hardware.netns_name, "eth1")["flags"]
            prefix = network.cidr.split("/")[1]
            assert inet_addresses(hardware.netns_name, "eth1") == [f"{eri.private_ip}/{prefix}"]
            default = [r for r in routes_via(hardware.netns_name, "eth1") if r["dst"] == "default"]
            assert [(r["gateway"], r["metric"]) for r in default] == [(network.gateway, 301)]
        finally:
            stop.set()
            reporter.cancel()
            await asyncio.wait({reporter} | ({agent_task} if agent_task else set()), timeout=60)
            await kubelet.stop()
            hardware.remove()
