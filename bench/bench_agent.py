"""Agent benchmarks: the real `erdma agent` process against the fake kubelet on a fixture host.

Run: `.venv/bin/python -m bench.bench_agent` (or `make bench`). Prints a Markdown table for
bench/RESULTS.md. Figures: agent start -> registered; Allocate at 1/16/64 concurrent callers,
each caller its own process and gRPC channel (`bench.agent_load`), with the floor (a no-op
unary RPC, GetDevicePluginOptions) measured the same way in the same run; GetPreferredAllocation
over 2,000 available IDs; kubelet restart -> re-registered; port down in sysfs -> kubelet sees
Unhealthy; and the agent's RSS with its metrics port on, for 2 devices x 1,000 slots, for
16 devices x 200 slots plus the shared `rdma/hca` resource, and for the memory goal's node
(3 eRDMA devices x 1,000 slots + one mlx5 HCA): after registration, after 10,000 Allocates from
one caller (kubelet calls Allocate one pod at a time), and after a 64-caller load, each read
once the agent has been idle for twice its trim delay (`erdma.malloc.QUIET_SECONDS`), as a node
sees it between pod starts.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path

from bench.agent_load import ALLOCATE, FLOOR, Phase, PhaseResult, run_phases
from bench.proc import loadavg, rss_mib
from bench.stats import pct
from erdma import malloc
from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.sim.fakehost_specs import PRIMARY, FakeNetdev, FakeRdma, HostSpec, mlx5_hca
from erdma.sim.node import SimulatedNode
from tests.fakes.ports import free_port

ERDMA = "aliyun/erdma"
SHARED = "rdma/hca"
CALLERS = (1, 16, 64)
Rows = list[tuple[str, str]]


async def latency(
    call: Callable[[], Awaitable[object]], callers: int, per_caller: int
) -> tuple[float, float]:
    """(p50, p99) in milliseconds of `call` issued by `callers` concurrent loops."""
    samples: list[float] = []

    async def loop() -> None:
        for _ in range(per_caller):
            started = time.perf_counter()
            await call()
            samples.append((time.perf_counter() - started) * 1000)

    await asyncio.gather(*(loop() for _ in range(callers)))
    return pct(samples, 0.5), pct(samples, 0.99)


async def scrape(port: int) -> None:
    """One Prometheus scrape, so the metrics port has served what it serves in a cluster."""
    url = f"http://127.0.0.1:{port}/metrics"
    await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())


def big_host(erdma_devices: int = 16, hcas: int = 4) -> HostSpec:
    """A node with 16 eRDMA devices (half per NUMA node) and 4 mlx5 HCAs for `rdma/hca`."""
    netdevs, rdma = [PRIMARY], []
    for i in range(erdma_devices):
        numa = 0 if i < erdma_devices // 2 else 1
        bus = 0x01 + i if numa == 0 else 0x81 + i
        netdev = FakeNetdev(f"eth{i + 1}", f"00:16:3e:2f:40:{i:02x}", f"0000:{bus:02x}:06.0")
        netdevs.append(netdev)
        rdma.append(FakeRdma(f"erdma_{i}", f"0000:{bus:02x}:07.0", netdev.name, numa, uverbs=i))
    for j in range(hcas):
        netdev, hca = mlx5_hca(j, numa=0 if j < hcas // 2 else 1)
        netdevs.append(netdev)
        rdma.append(replace(hca, uverbs=erdma_devices + j))
    return HostSpec(netdevs=tuple(netdevs), rdma=tuple(rdma))


async def started(
    root: Path, spec: HostSpec | str, args: Sequence[str], resources: Sequence[str]
) -> tuple[SimulatedNode, int, float]:
    """A node whose agent is registered and listed, its metrics port, and how long it took."""
    port = free_port()
    node = SimulatedNode(root, spec, [*args, "--metrics-port", str(port)])
    await node.kubelet.start()
    began = time.perf_counter()
    await node.start(kubelet=False)
    for resource in resources:
        await node.wait_registered(resource, 30)
    return node, port, (time.perf_counter() - began) * 1000


def allocate_rows(results: list[PhaseResult]) -> Rows:
    """One row per caller count: Allocate against the floor measured just before it."""
    rows: Rows = []
    floors = {r.phase.callers: r for r in results if r.phase.method == FLOOR}
    for alloc in (r for r in results if r.phase.method == ALLOCATE):
        floor = floors[alloc.phase.callers]
        rows.append(
            (
                f"Allocate, {alloc.phase.callers} caller process(es): p50 / p99, throughput",
                f"{alloc.pct(0.5):.2f} / {alloc.pct(0.99):.2f} ms, {alloc.calls_per_s:.0f}/s "
                f"(floor, no-op RPC: {floor.pct(0.5):.2f} / {floor.pct(0.99):.2f} ms, "
                f"{floor.calls_per_s:.0f}/s; p99 ratio {alloc.pct(0.99) / floor.pct(0.99):.2f})",
            )
        )
    return rows


async def run_reference(root: Path, rounds: int, calls: int) -> Rows:
    """2 devices x 1,000 slots: every latency figure, then the RSS after all of it."""
    node, port, took = await started(root, "default", ["--slots-per-device", "1000"], [ERDMA])
    rows: Rows = [("agent start -> registered and listed", f"{took:.0f} ms")]
    await scrape(port)
    endpoint = node.kubelet.endpoint(ERDMA)
    phases = [
        Phase(method, callers, max(1, calls // callers))
        for callers in CALLERS
        for method in (FLOOR, ALLOCATE)
    ]
    rows += allocate_rows(await asyncio.to_thread(run_phases, endpoint.path, ["erdma_0/1"], phases))
    available = list(node.kubelet.latest(ERDMA) or {})[:2000]
    pref = await latency(lambda: node.kubelet.preferred(ERDMA, available, [], 4), 1, 200)
    rows.append(
        (
            "GetPreferredAllocation, 2,000 available IDs, size 4: p50 / p99",
            f"{pref[0]:.2f} / {pref[1]:.2f} ms",
        )
    )
    rows.append(await restarts(node, rounds))
    rows.append(await socket_deletions(node, rounds))
    rows.append(await port_downs(node, rounds))
    await scrape(port)
    assert node.process is not None
    rows.append(
        (
            "agent RSS, 2 devices x 1,000 slots, after the run",
            f"{rss_mib(node.process.pid):.1f} MiB",
        )
    )
    await node.stop()
    return rows


async def timed(
    action: Callable[[], object], node: SimulatedNode, done: Callable[[], bool]
) -> float:
    began = time.perf_counter()
    action()
    await node.kubelet.wait_for(done, 10)
    return (time.perf_counter() - began) * 1000


async def restarts(node: SimulatedNode, rounds: int) -> tuple[str, str]:
    """Kubelet deletes every socket and comes back; until registered again and listed."""
    took = []
    for _ in range(rounds):
        began = time.perf_counter()
        await node.kubelet.restart()
        await node.kubelet.wait_for(
            lambda: node.kubelet.registered(ERDMA) and bool(node.kubelet.latest(ERDMA)), 10
        )
        took.append((time.perf_counter() - began) * 1000)
    return (
        "kubelet restart -> re-registered and listed: median / max",
        f"{statistics.median(took):.0f} / {max(took):.0f} ms",
    )


async def socket_deletions(node: SimulatedNode, rounds: int) -> tuple[str, str]:
    """The agent's own socket deleted under it; until served again and registered anew."""
    took = [await socket_deletion(node) for _ in range(rounds)]
    return (
        "plugin socket deleted -> served again and re-registered: median / max",
        f"{statistics.median(took):.0f} / {max(took):.0f} ms",
    )


async def socket_deletion(node: SimulatedNode) -> float:
    registrations = len(node.kubelet.registrations)
    socket = Path(node.kubelet.endpoint(ERDMA).path)
    return await timed(socket.unlink, node, lambda: len(node.kubelet.registrations) > registrations)


async def port_downs(node: SimulatedNode, rounds: int) -> tuple[str, str]:
    """`ports/1/state` rewritten in sysfs; until kubelet's stream shows Unhealthy."""
    downs = []
    for _ in range(rounds):
        downs.append(
            await timed(
                lambda: node.host.set_port_state("erdma_0", False),
                node,
                lambda: (node.kubelet.latest(ERDMA) or {}).get("erdma_0/0") == "Unhealthy",
            )
        )
        await timed(
            lambda: node.host.set_port_state("erdma_0", True),
            node,
            lambda: (node.kubelet.latest(ERDMA) or {}).get("erdma_0/0") == "Healthy",
        )
    return (
        "port DOWN in sysfs -> kubelet sees Unhealthy: median / max",
        f"{statistics.median(downs):.0f} / {max(downs):.0f} ms",
    )


async def run_wide(root: Path, calls: int) -> Rows:
    """16 devices x 200 slots plus `rdma/hca` over 4 HCAs: start, some Allocates, RSS."""
    args = ["--slots-per-device", "200", "--resources", f"{ERDMA},shared"]
    node, port, took = await started(root, big_host(), args, [ERDMA, SHARED])
    stub = node.kubelet.endpoint(ERDMA).stub
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=["erdma_15/1"])]
    )
    await latency(lambda: stub.Allocate(request), 16, max(1, calls // 16))
    await scrape(port)
    assert node.process is not None
    rss = rss_mib(node.process.pid)
    await node.stop()
    return [
        ("agent start -> both resources registered, 16 x 200 slots + rdma/hca", f"{took:.0f} ms"),
        ("agent RSS, 16 devices x 200 slots + rdma/hca, after Allocates", f"{rss:.1f} MiB"),
    ]


async def run_memory(root: Path, allocates: int, calls: int) -> Rows:
    """The memory goal's node, metrics on and scraped: RSS after registration, after
    `allocates` Allocates from one caller, after `calls` more from 64 caller processes."""
    args = ["--slots-per-device", "1000", "--resources", f"{ERDMA},shared"]
    node, port, _ = await started(root, big_host(erdma_devices=3, hcas=1), args, [ERDMA, SHARED])
    assert node.process is not None
    pid, socket = node.process.pid, node.kubelet.endpoint(ERDMA).path
    name = "agent RSS, 3 devices x 1,000 slots + mlx5 rdma/hca"

    async def settled() -> str:
        await scrape(port)
        await asyncio.sleep(2 * malloc.QUIET_SECONDS)
        return f"{rss_mib(pid):.1f} MiB"

    rows: Rows = [(f"{name}, after registration", await settled())]
    for callers, each, when in (
        (1, allocates, f"after {allocates:,} Allocates"),
        (64, max(1, calls // 64), "after a 64-caller load"),
    ):
        phase = Phase(ALLOCATE, callers, each)
        await asyncio.to_thread(run_phases, socket, ["erdma_0/1"], [phase])
        rows.append((f"{name}, {when}", await settled()))
    await node.stop()
    return rows


async def run(rounds: int, calls: int, allocates: int) -> Rows:
    with tempfile.TemporaryDirectory(prefix="bench-", dir="/tmp") as tmp:
        rows = await run_memory(Path(tmp) / "memory", allocates, calls)
        rows += await run_reference(Path(tmp) / "reference", rounds, calls)
        rows += await run_wide(Path(tmp) / "wide", calls)
    return rows


async def run_memory_only(calls: int, allocates: int) -> Rows:
    with tempfile.TemporaryDirectory(prefix="bench-", dir="/tmp") as tmp:
        return await run_memory(Path(tmp), allocates, calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=3200, help="RPCs per Allocate/floor phase")
    parser.add_argument(
        "--allocates", type=int, default=10_000, help="one caller's Allocates before RSS"
    )
    parser.add_argument(
        "--only-memory", action="store_true", help="only the 3 x 1,000 + mlx5 memory rows"
    )
    args = parser.parse_args()
    print(f"load average at start: {loadavg()}")
    if args.only_memory:
        rows = asyncio.run(run_memory_only(args.calls, args.allocates))
    else:
        rows = asyncio.run(run(args.rounds, args.calls, args.allocates))
    print(f"load average at end: {loadavg()}")
    print("| measurement | result |\n| --- | --- |")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
