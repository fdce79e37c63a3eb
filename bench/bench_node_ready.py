"""Node-ready benchmark: a Node object appears, how long until kubelet sees `aliyun/erdma`.

Run: `.venv/bin/python -m bench.bench_node_ready --nodes 50`.

Everything is the production code path except the cloud, the host and kubelet: a real test API
server (kube-testserver on etcd) with the ERdmaDevice CRD; the controller (`run_controller`,
production intervals and worker count) against the ECS emulator, both in one child process so
the controller's CPU is not shared with the agents' event loop; and one Regular-mode agent per
node (`erdma.agent.service.Agent`, in this process, one event loop, each with its own fixture
host and `FakeKubelet`). Agents are started and registered before the clock starts, as the
agent's DaemonSet pod would be long-lived by the time its node's ERIs matter; then all Nodes
are created at once (providerID, then Ready and InternalIP, as kubelet does).

The instances are `ecs.g8i.8xlarge` (one ERI: the primary ENI converted to HighPerformance, so
no secondary netdev needs netlink, which is how the Regular-mode agent tests avoid it too).
Each fixture host's ERI carries the MAC of its instance's primary ENI in the emulator, so the
agent exposes exactly the device the controller recorded.

Printed per node, then median / p99 / max: Node created -> ERdmaDevice all Ready (seen by a
list every 0.1 s, so up to 0.1 s late) -> kubelet has a non-empty `aliyun/erdma` list.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
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
from erdma.sim import fakehost
from erdma.sim.fakehost_specs import ERDMA0, PRIMARY
from erdma.sim.kubelet import FakeKubelet
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GENERAL_ERI, cloud_for, standard_world
from tests.fakes.kubeapi import KubeApiServer, install_crd
from tests.integration.controller_support import set_ready

ERDMA = "aliyun/erdma"
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
    private_ip: str
    mac: str


def _controller(kubeconfig: str, nodes: int, transition: float, conn: Connection) -> None:
    """Child process: the emulated region and the production controller against it."""
    emulator = EcsEmulator(standard_world(transition_delay=transition))
    instances = []
    for _ in range(nodes):
        record = emulator.world.add_instance(GENERAL_ERI.name)
        mac = emulator.world.enis[record.primary_eni_id].mac
        instances.append(Instance(record.id, record.private_ip, mac))

    async def serve() -> None:
        stop = asyncio.Event()
        config = parse_config({"region": emulator.world.region, "healthPort": 0})
        cloud = cloud_for(emulator)
        task = asyncio.create_task(
            run_controller(config, cloud, kubeconfig=kubeconfig, leader_elect=False, stop=stop)
        )
        conn.send(instances)
        await asyncio.to_thread(conn.recv)  # "report"
        conn.send({name: cloud.metrics.value(name) for name in SUMMARY})
        await asyncio.to_thread(conn.recv)  # "stop"
        stop.set()
        await asyncio.wait({task}, timeout=15)

    with emulator.in_thread():
        asyncio.run(serve())


def host_spec(mac: str) -> fakehost.HostSpec:
    """A node whose one ERI is its primary ENI (eth0), with the emulator's MAC for it."""
    return fakehost.HostSpec(
        netdevs=(replace(PRIMARY, mac=mac),), rdma=(replace(ERDMA0, netdev="eth0"),)
    )


async def start_agent(
    root: Path, node: str, mac: str, kubeconfig: Path, stop: asyncio.Event
) -> tuple[FakeKubelet, asyncio.Task[None]]:
    """One Regular-mode agent on its own fixture host, registered with its own fake kubelet."""
    fakehost.build(root / "host", host_spec(mac))
    kubelet = FakeKubelet(root / "kubelet" / "device-plugins")
    await kubelet.start()
    settings = {
        "host_root": root / "host", "kubelet_dir": root / "kubelet", "node_name": node,
        "kubeconfig": str(kubeconfig), "local_eri_discovery": False, "metrics_port": 0,
    }  # fmt: skip
    task = asyncio.create_task(Agent(build_config(environ={}, flags=settings)).run(stop))
    await kubelet.wait_for(lambda: kubelet.registered(ERDMA), 60, f"{node} registered")
    return kubelet, task


async def join(client: AsyncClient, name: str, inst: Instance) -> float:
    """Create the Node as kubelet does; return the monotonic time it was created."""
    started = time.monotonic()
    node = Node(metadata=ObjectMeta(name=name), spec=NodeSpec(providerID=f"cn-hangzhou.{inst.id}"))
    await client.create(node)
    await set_ready(client, name, True, inst.private_ip)
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


async def allocatable(kubelet: FakeKubelet, timeout: float) -> float:
    """The monotonic time kubelet first holds a non-empty `aliyun/erdma` list."""
    await kubelet.wait_for(lambda: bool(kubelet.latest(ERDMA)), timeout, "allocatable")
    return time.monotonic()


async def measure(args: argparse.Namespace, server: KubeApiServer) -> None:
    await install_crd(server.kubeconfig)
    conn, child = multiprocessing.Pipe()
    proc = multiprocessing.Process(
        target=_controller,
        args=(str(server.kubeconfig), args.nodes, args.transition, child),
        daemon=True,
    )
    proc.start()
    instances: list[Instance] = conn.recv()
    names = [f"ready-node-{i:03d}" for i in range(args.nodes)]
    stop = asyncio.Event()
    client = AsyncClient(KubeConfig.from_file(server.kubeconfig))
    kube = KubeApi(client)
    with tempfile.TemporaryDirectory(prefix="erdma-ready-") as tmp:
        agents = await asyncio.gather(
            *(
                start_agent(Path(tmp) / n, n, i.mac, server.kubeconfig, stop)
                for n, i in zip(names, instances, strict=True)
            )
        )
        seen: dict[str, float] = {}
        watcher = asyncio.create_task(watch_ready(kube, set(names), seen))
        exposed = [asyncio.create_task(allocatable(k, args.timeout)) for k, _ in agents]
        created = await asyncio.gather(
            *(join(client, n, i) for n, i in zip(names, instances, strict=True))
        )
        done = await asyncio.gather(*exposed)
        await asyncio.wait_for(watcher, args.timeout)
        stop.set()
        await asyncio.wait([t for _, t in agents], timeout=15)
        for kubelet, _ in agents:
            await kubelet.stop()
    conn.send("report")
    summary: dict[str, float] = conn.recv()
    conn.send("stop")
    proc.join(20)
    await client.close()
    report(args, names, created, seen, done, summary)


def report(
    args: argparse.Namespace,
    names: list[str],
    created: list[float],
    seen: dict[str, float],
    done: list[float],
    summary: dict[str, float],
) -> None:
    to_ready = [seen[n] - c for n, c in zip(names, created, strict=True)]
    to_kubelet = [d - seen[n] for n, d in zip(names, done, strict=True)]
    total = [d - c for c, d in zip(created, done, strict=True)]
    print(f"## Node ready, end to end: {args.nodes} nodes joining at once")
    print()
    print("| stage | median | p99 | max |")
    print("| --- | --- | --- | --- |")
    for stage, values in (
        ("Node created -> ERdmaDevice Ready", to_ready),
        ("ERdmaDevice Ready -> kubelet allocatable", to_kubelet),
        ("Node created -> kubelet allocatable", total),
    ):
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
    with KubeApiServer.start() as server:
        asyncio.run(measure(args, server))


if __name__ == "__main__":
    main()
