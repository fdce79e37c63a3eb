"""Node-ready benchmark: a GPU Node object appears, how long until kubelet sees its ERIs.

Run: `.venv/bin/python -m bench.bench_node_ready --nodes 50` (as root: each node gets a network
namespace).

Everything is the production code path except the cloud, the hosts and kubelet: a real test API
server (kube-testserver on etcd) with the ERdmaDevice CRD; the controller (`run_controller`,
production intervals and worker count) against the ECS emulator, both in one child process so
the controller's CPU is not shared with the agents' event loop; and one Regular-mode agent per
node (`erdma.agent.service.Agent`, in this process, one event loop, each with its own fixture
host, network namespace, instance metadata path and `FakeKubelet`). Agents are started and
registered before the clock starts, as the agent's DaemonSet pod would be long-lived by the time
its node's ERIs matter; then all Nodes are created at once (providerID, then Ready and
InternalIP, as kubelet does).

The instances are `ecs.ebmgn8v.48xlarge` (two network cards): the controller converts the
primary ENI for card 0 and creates and attaches an ERI for card 1, which ECS takes
`--transition` seconds to finish. Each node's hardware follows ECS (`tests.fakes.eri_hotplug`,
run by a third process, as a kernel runs beside its agent): no RDMA device at first, erdma_0 on
eth0 once the primary is HighPerformance, and eth1 (a link in the node's namespace and its
sysfs entry) with erdma_1 once the attach has finished, as the kernel hot-plugs it. The agent
rescans sysfs, brings eth1 up with the address instance metadata gives for its MAC and exposes
both cards.

Printed per stage, median / p99 / max: Node created -> ERdmaDevice all Ready (seen by a list
every 0.1 s, so up to 0.1 s late) -> kubelet lists both cards (`aliyun/erdma`); also when ECS
had the attached ERI in use, how long the hardware process took to show it (the harness's own
lag), and when kubelet listed the node's first card.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import queue
import shutil
import statistics
import sys
import tempfile
import time
import traceback
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.queues import Queue
from pathlib import Path

from lightkube import AsyncClient, KubeConfig
from lightkube.models.core_v1 import NodeSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node

from bench.stats import pct
from erdma.agent.config import build_config
from erdma.agent.service import Agent
from erdma.controller.config import parse_config
from erdma.controller.main import run_controller
from erdma.kube import crd
from erdma.kube.client import KubeApi
from erdma.sim.kubelet import FakeKubelet
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GPU_TWO_CARDS, cloud_for, standard_world
from tests.fakes.eri_hotplug import (
    AttachedEri,
    NodeHardware,
    NodeNetwork,
    node_network,
    report_attaches,
)
from tests.fakes.kubeapi import KubeApiServer, install_crd
from tests.integration.controller_support import set_ready

ERDMA = "aliyun/erdma"
CARDS = frozenset({"erdma_0", "erdma_1"})
POLL = 0.1
#: controller metrics the child reports, to tell queueing from the passes themselves
SUMMARY = (
    "erdma_controller_reconciles_total",
    "erdma_controller_reconcile_duration_seconds_sum",
    "erdma_controller_queue_wait_seconds_sum",
    "erdma_controller_queue_wait_seconds_count",
    "erdma_controller_ecs_calls_total",
)


@dataclass(frozen=True)
class Instance:
    """What the agent side needs to know of one emulated instance."""

    id: str
    network: NodeNetwork
    metadata_url: str


def _controller(
    kubeconfig: str, nodes: int, transition: float, conn: Connection, attached: Queue[AttachedEri]
) -> None:
    """Child process: the emulated region, its instances' hardware events (put on
    ``attached``) and the production controller against it."""
    emulator = EcsEmulator(standard_world(transition_delay=transition))
    records = [emulator.world.add_instance(GPU_TWO_CARDS.name) for _ in range(nodes)]

    async def serve() -> None:
        stop = asyncio.Event()
        config = parse_config({"region": emulator.world.region, "healthPort": 0})
        cloud = cloud_for(emulator)
        task = asyncio.create_task(
            run_controller(config, cloud, kubeconfig=kubeconfig, leader_elect=False, stop=stop)
        )
        ids = {r.id for r in records}
        hotplug = asyncio.create_task(report_attaches(emulator.world, ids, attached.put))
        conn.send(
            [
                Instance(r.id, node_network(emulator.world, r.id), emulator.metadata_url_for(r.id))
                for r in records
            ]
        )
        await asyncio.to_thread(conn.recv)  # "report"
        conn.send({name: cloud.metrics.value(name) for name in SUMMARY})
        await asyncio.to_thread(conn.recv)  # "stop"
        hotplug.cancel()
        stop.set()
        await asyncio.wait({task, hotplug}, timeout=15)

    with emulator.in_thread():
        asyncio.run(serve())


@dataclass(frozen=True)
class Machine:
    """Where one simulated node's hardware lives (picklable: the hardware process builds it)."""

    instance_id: str
    host_root: Path
    netns_name: str
    network: NodeNetwork

    def hardware(self) -> NodeHardware:
        return NodeHardware(self.host_root, self.netns_name, self.network)


def _hardware(machines: list[Machine], attached: Queue[AttachedEri], conn: Connection) -> None:
    """Child process: every node's hardware, as each node's kernel runs beside its agent and
    not in its process (in the agents' busy process a hot-plug lagged ECS by 0.4-0.6 s). Builds
    the fixture hosts and namespaces, then plugs each ERI the controller's process reports
    (nodes side by side) until told to stop; answers with (ECS had it in use, it appeared on
    the host) per instance, for the ERI that needed an attach; removes it all."""
    hardware = {m.instance_id: m.hardware() for m in machines}
    plugged: dict[str, tuple[float, float]] = {}

    def plug(eri: AttachedEri) -> None:
        try:
            hardware[eri.instance_id].plug(eri)
        except Exception:  # an executor keeps it to itself; the node would just never be Ready
            print(f"hardware: plugging {eri} failed", file=sys.stderr)
            traceback.print_exc()
            raise
        if not eri.primary:
            plugged[eri.instance_id] = (eri.in_use_at, time.monotonic())

    try:
        for hw in hardware.values():
            hw.create()
        conn.send("ready")
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="hardware") as pool:
            while not conn.poll():  # "stop"
                try:
                    pool.submit(plug, attached.get(timeout=POLL))
                except queue.Empty:
                    continue
        conn.recv()
        conn.send(plugged)
    finally:
        for hw in hardware.values():
            hw.remove()


async def start_agent(
    machine: Machine, node: str, inst: Instance, kubeconfig: Path, stop: asyncio.Event
) -> tuple[FakeKubelet, asyncio.Task[None]]:
    """One Regular-mode agent on its node's hardware, registered with its own fake kubelet."""
    root = machine.host_root.parent
    kubelet = FakeKubelet(root / "kubelet" / "device-plugins")
    await kubelet.start()
    settings = {
        "host_root": machine.host_root,
        "kubelet_dir": root / "kubelet",
        "node_name": node,
        "kubeconfig": str(kubeconfig),
        "local_eri_discovery": False,
        "metrics_port": 0,
        "metadata_url": inst.metadata_url,
    }
    agent = Agent(build_config(environ={}, flags=settings), netns=machine.hardware().netns)
    task = asyncio.create_task(agent.run(stop))
    await kubelet.wait_for(lambda: kubelet.registered(ERDMA), 60, f"{node} registered")
    return kubelet, task


async def join(client: AsyncClient, name: str, inst: Instance) -> float:
    """Create the Node as kubelet does; return the monotonic time it was created."""
    started = time.monotonic()
    node = Node(metadata=ObjectMeta(name=name), spec=NodeSpec(providerID=f"cn-hangzhou.{inst.id}"))
    await client.create(node)
    await set_ready(client, name, True, inst.network.address)
    return started


async def watch_ready(kube: KubeApi, names: set[str], seen: dict[str, float]) -> None:
    """Record when each node's ERdmaDevice is first all Ready (one list per poll)."""
    while len(seen) < len(names):
        now = time.monotonic()
        for obj in await kube.list_devices():
            name = obj["metadata"]["name"]
            if name in names and name not in seen and crd.parse(obj).all_ready:
                seen[name] = now
        await asyncio.sleep(POLL)


def cards(kubelet: FakeKubelet) -> set[str]:
    """The RDMA devices behind kubelet's `aliyun/erdma` list (IDs are `<device>/<slot>`)."""
    return {device_id.split("/")[0] for device_id in kubelet.latest(ERDMA) or {}}


async def allocatable(kubelet: FakeKubelet, timeout: float) -> tuple[float, float]:
    """When kubelet first lists a card, and when it lists both."""
    await kubelet.wait_for(lambda: bool(cards(kubelet)), timeout, "a card allocatable")
    first = time.monotonic()
    await kubelet.wait_for(lambda: cards(kubelet) == CARDS, timeout, "both cards allocatable")
    return first, time.monotonic()


async def measure(args: argparse.Namespace, server: KubeApiServer, tmp: Path) -> None:
    await install_crd(server.kubeconfig)
    cloud_conn, cloud_end = multiprocessing.Pipe()
    attached: Queue[AttachedEri] = multiprocessing.Queue()
    cloud = multiprocessing.Process(
        target=_controller,
        args=(str(server.kubeconfig), args.nodes, args.transition, cloud_end, attached),
        daemon=True,
    )
    cloud.start()
    instances: list[Instance] = cloud_conn.recv()
    names = [f"ready-node-{i:03d}" for i in range(args.nodes)]
    machines = [
        Machine(i.id, tmp / n / "host", f"erdma-b-{uuid.uuid4().hex[:8]}", i.network)
        for n, i in zip(names, instances, strict=True)
    ]
    hw_conn, hw_end = multiprocessing.Pipe()
    hardware = multiprocessing.Process(
        target=_hardware, args=(machines, attached, hw_end), daemon=True
    )
    hardware.start()
    await asyncio.to_thread(hw_conn.recv)  # "ready"
    stop = asyncio.Event()
    client = AsyncClient(KubeConfig.from_file(server.kubeconfig))
    kube = KubeApi(client)
    agents: list[tuple[FakeKubelet, asyncio.Task[None]]] = []
    try:
        for machine, name, inst in zip(machines, names, instances, strict=True):
            agents.append(await start_agent(machine, name, inst, server.kubeconfig, stop))
        seen: dict[str, float] = {}
        watcher = asyncio.create_task(watch_ready(kube, set(names), seen))
        exposed = [asyncio.create_task(allocatable(k, args.timeout)) for k, _ in agents]
        created = await asyncio.gather(
            *(join(client, n, i) for n, i in zip(names, instances, strict=True))
        )
        done = await asyncio.gather(*exposed)
        await asyncio.wait_for(watcher, args.timeout)
    finally:
        stop.set()
        await asyncio.wait([t for _, t in agents], timeout=15)
        for kubelet, _ in agents:
            await kubelet.stop()
        hw_conn.send("stop")
        plugged: dict[str, tuple[float, float]] = hw_conn.recv()
        hardware.join(20)
    cloud_conn.send("report")
    summary: dict[str, float] = cloud_conn.recv()
    cloud_conn.send("stop")
    cloud.join(20)
    await client.close()
    report(args, names, created, [plugged[i.id] for i in instances], seen, done, summary)


def report(
    args: argparse.Namespace,
    names: list[str],
    created: list[float],
    hotplugs: list[tuple[float, float]],
    seen: dict[str, float],
    done: list[tuple[float, float]],
    summary: dict[str, float],
) -> None:
    total = [both - c for c, (_, both) in zip(created, done, strict=True)]
    stages = (
        (
            "Node created -> ECS has the attached ERI in use",
            [a - c for (a, _), c in zip(hotplugs, created, strict=True)],
        ),
        (
            "ECS has it in use -> it appears on the host (the harness's lag)",
            [p - a for a, p in hotplugs],
        ),
        (
            "Node created -> ERdmaDevice Ready",
            [seen[n] - c for n, c in zip(names, created, strict=True)],
        ),
        (
            "ERdmaDevice Ready -> kubelet lists both cards",
            [both - seen[n] for n, (_, both) in zip(names, done, strict=True)],
        ),
        (
            "Node created -> kubelet lists its first card",
            [first - c for c, (first, _) in zip(created, done, strict=True)],
        ),
        ("**Node created -> kubelet lists both cards**", total),
    )
    print(f"## Node ready, end to end: {args.nodes} GPU nodes joining at once")
    print()
    print("| stage | median | p99 | max |")
    print("| --- | --- | --- | --- |")
    for stage, values in stages:
        print(
            f"| {stage} | {statistics.median(values):.2f} s | {pct(values, 0.99):.2f} s | "
            f"{max(values):.2f} s |"
        )
    passes = summary["erdma_controller_reconciles_total"]
    waits = summary["erdma_controller_queue_wait_seconds_count"] or 1
    print()
    print(
        f"controller (production worker count and intervals): {passes / args.nodes:.2f} "
        f"reconcile passes per node, mean pass "
        f"{summary['erdma_controller_reconcile_duration_seconds_sum'] / (passes or 1):.3f} s, "
        f"mean queue wait {summary['erdma_controller_queue_wait_seconds_sum'] / waits:.2f} s, "
        f"{summary['erdma_controller_ecs_calls_total'] / args.nodes:.2f} ECS calls per node"
    )
    target = args.transition + 2
    print()
    print(
        f"target median <= attach {args.transition:g} s + 2 s = {target:g} s: "
        f"{'met' if statistics.median(total) <= target else 'missed'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50, help="nodes joining at once")
    parser.add_argument("--transition", type=float, default=1.0, help="ECS attach time (s)")
    parser.add_argument("--timeout", type=float, default=120.0, help="give up after (s)")
    args = parser.parse_args()
    if args.nodes < 1:
        parser.error("--nodes must be >= 1")
    if os.geteuid() != 0 or shutil.which("ip") is None:
        parser.error("needs root and iproute2 (`ip`): each simulated node gets a network namespace")
    with KubeApiServer.start() as server, tempfile.TemporaryDirectory(prefix="erdma-ready-") as tmp:
        asyncio.run(measure(args, server, Path(tmp)))


if __name__ == "__main__":
    main()
