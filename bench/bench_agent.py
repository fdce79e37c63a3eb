"""Agent benchmarks: the real `erdma agent` process against the fake kubelet on a fixture host.

Run: `.venv/bin/python -m bench.bench_agent` (or `make bench`). Prints a Markdown table for
bench/RESULTS.md. Figures: Allocate latency at 1/16/64 concurrent callers with the floor (a
no-op unary RPC, GetDevicePluginOptions, on the same socket and client), GetPreferredAllocation
over 2,000 available IDs, kubelet restart -> re-registered, port down in sysfs -> kubelet sees
Unhealthy, agent start -> registered, and the agent's RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.sim.node import SimulatedNode

ERDMA = "aliyun/erdma"


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


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


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def timed(
    action: Callable[[], object], node: SimulatedNode, done: Callable[[], bool]
) -> float:
    started = time.perf_counter()
    action()
    await node.kubelet.wait_for(done, 10)
    return (time.perf_counter() - started) * 1000


async def run(rounds: int) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-", dir="/tmp") as tmp:
        node = SimulatedNode(Path(tmp), "default", ["--slots-per-device", "1000"])
        await node.kubelet.start()
        started = time.perf_counter()
        await node.start(kubelet=False)
        await node.wait_registered(ERDMA, 30)
        rows.append(
            (
                "agent start -> registered and listed",
                f"{(time.perf_counter() - started) * 1000:.0f} ms",
            )
        )
        stub = node.kubelet.endpoint(ERDMA).stub
        request = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=["erdma_0/1"])]
        )
        for callers in (1, 16, 64):
            per = max(20, 2000 // callers)
            floor = await latency(lambda: stub.GetDevicePluginOptions(pb.Empty()), callers, per)
            alloc = await latency(lambda: stub.Allocate(request), callers, per)
            rows.append(
                (
                    f"Allocate, {callers} concurrent caller(s): p50 / p99",
                    f"{alloc[0]:.2f} / {alloc[1]:.2f} ms "
                    f"(floor, no-op RPC: {floor[0]:.2f} / {floor[1]:.2f} ms)",
                )
            )
        available = list(node.kubelet.latest(ERDMA) or {})[:2000]
        pref = await latency(lambda: node.kubelet.preferred(ERDMA, available, [], 4), 1, 200)
        rows.append(
            (
                "GetPreferredAllocation, 2,000 available IDs, size 4: p50 / p99",
                f"{pref[0]:.2f} / {pref[1]:.2f} ms",
            )
        )
        restarts = []
        for _ in range(rounds):
            began = time.perf_counter()
            await node.kubelet.restart()
            await node.kubelet.wait_for(
                lambda: node.kubelet.registered(ERDMA) and bool(node.kubelet.latest(ERDMA)), 10
            )
            restarts.append((time.perf_counter() - began) * 1000)
        rows.append(
            (
                "kubelet restart -> re-registered and listed: median / max",
                f"{statistics.median(restarts):.0f} / {max(restarts):.0f} ms",
            )
        )
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
        rows.append(
            (
                "port DOWN in sysfs -> kubelet sees Unhealthy: median / max",
                f"{statistics.median(downs):.0f} / {max(downs):.0f} ms",
            )
        )
        assert node.process is not None
        rows.append(("agent RSS (2 devices x 1,000 slots)", f"{rss_mib(node.process.pid):.1f} MiB"))
        await node.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    rows = asyncio.run(run(args.rounds))
    print("| measurement | result |\n| --- | --- |")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
