"""Controller cloud benchmark: N simulated instances brought to Ready ERIs through real ECS calls.

Run: `.venv/bin/python -m bench.bench_controller_cloud --nodes 1000`.

The ECS emulator runs in its own process (so its CPU and memory are not the controller's) with
a fixed account rate limit and per-call latency.  The controller side is the production code:
``EcsCloud`` on the official SDK with its token bucket, and ``ensure_eris`` passes run by a
bounded pool of reconcilers, requeueing a node until its ERIs are Ready.

Printed: time until every instance is Ready; the lower bound (the calls no batching can save,
the mutations measured on one node of each type without limits, plus one DescribeInstanceTypes
per type, divided by the rate limit); API calls
per node, in all and by action; retries and throttled calls; the controller process's peak RSS.
Call, retry and throttle figures are read from the controller's Prometheus metrics
(``erdma.controller.metrics``), the ones its ``/metrics`` serves; the count ECS received is
printed beside them as a check.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import resource
import time
from collections import Counter
from dataclasses import dataclass
from multiprocessing.connection import Connection

from prometheus_client.samples import Sample

from erdma.controller.cloud import CloudError
from erdma.controller.eri import ensure_eris
from erdma.controller.metrics import ControllerMetrics
from erdma.controller.providers.ecs.client import EcsCloud
from erdma.controller.ratelimit import RetryPolicy, ThrottlePolicy
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GENERAL_ERI, GPU_TWO_CARDS, cloud_for, standard_world

TYPES = (GPU_TWO_CARDS.name, GENERAL_ERI.name)
RETRY = RetryPolicy(max_attempts=8, base_delay=0.1, max_delay=2.0)
CALLS = "erdma_controller_ecs_calls_total"
RETRIES = "erdma_controller_ecs_retries_total"
THROTTLES = "erdma_controller_ecs_throttles_total"
MUTATIONS = ("CreateNetworkInterface", "AttachNetworkInterface", "ModifyNetworkInterfaceAttribute")


def _samples(metrics: ControllerMetrics, name: str) -> list[Sample]:
    return [s for m in metrics.registry.collect() for s in m.samples if s.name == name]


@dataclass(frozen=True)
class Scenario:
    nodes: int
    rate: float
    latency: float
    transition: float


def _serve(scenario: Scenario, conn: Connection) -> None:
    """Child process: build the region, serve it, report counters when asked."""
    emulator = EcsEmulator(standard_world(transition_delay=scenario.transition))
    ids = [emulator.world.add_instance(TYPES[i % len(TYPES)]).id for i in range(scenario.nodes)]
    emulator.faults.latency = scenario.latency
    emulator.faults.rate_limit = scenario.rate
    with emulator.in_thread():
        conn.send((emulator.port, ids))
        conn.recv()  # "report"
        with emulator.world.lock:
            created = sum(1 for e in emulator.world.enis.values() if e.type == "Secondary")
        conn.send((emulator.faults.total_calls(), created))
        conn.recv()  # "stop"


class RemoteEmulator:
    """The endpoint of an emulator in a child process, addressable like a local one."""

    def __init__(self, scenario: Scenario) -> None:
        self._conn, child = multiprocessing.Pipe()
        self._proc = multiprocessing.Process(target=_serve, args=(scenario, child), daemon=True)
        self._proc.start()
        self.port, self.instance_ids = self._conn.recv()
        self.world = standard_world()  # region name only; the state lives in the child
        self.endpoint = f"127.0.0.1:{self.port}"

    def counters(self) -> tuple[int, int]:
        """Calls ECS received (a check on the client's count), and ERIs created in the region."""
        self._conn.send("report")
        received, created = self._conn.recv()
        return received, created

    def stop(self) -> None:
        self._conn.send("stop")
        self._proc.join(10)


async def bring_up(
    cloud: EcsCloud, instance_id: str, gate: asyncio.Semaphore, requeue: float
) -> tuple[float, int]:
    """Reconcile one node until Ready, as the reconciler does; return (seconds, passes).

    Every pass looks the instance up again (its ENIs come with it), as a reconcile pass does.
    """
    start = time.monotonic()
    passes = 0
    while True:
        async with gate:
            try:
                instance = await cloud.find_instance(instance_id=instance_id)
                assert instance is not None, instance_id
                caps = await cloud.instance_type_caps(instance.instance_type)
                passes += 1
                result = await ensure_eris(cloud, instance, caps)
                if result.ready:
                    return time.monotonic() - start, passes
            except CloudError:
                pass  # requeue, like a reconciler would
        await asyncio.sleep(requeue)


async def calibrate(transition: float) -> dict[str, int]:
    """Calls one node of each type cannot share with other nodes: the per-node minimum.

    Those are its mutations (create, attach, convert), one request each; look-ups and tags are
    batched across nodes, and DescribeInstanceTypes is asked once per type.
    """
    needed: dict[str, int] = {}
    for type_name in TYPES:
        async with EcsEmulator(standard_world(transition_delay=transition)) as emulator:
            record = emulator.world.add_instance(type_name)
            cloud = cloud_for(emulator)
            await bring_up(cloud, record.id, asyncio.Semaphore(1), transition)
            needed[type_name] = int(sum(cloud.metrics.value(CALLS, action=a) for a in MUTATIONS))
    return needed


async def run(args: argparse.Namespace) -> None:
    needed = await calibrate(args.transition)
    scenario = Scenario(args.nodes, args.rate, args.latency, args.transition)
    remote = RemoteEmulator(scenario)
    try:
        cloud = cloud_for(
            remote,  # type: ignore[arg-type]  # duck-typed: endpoint + world.region
            rate_limit=args.rate * args.client_share,
            burst=max(1.0, args.rate * args.client_share / 10),
            timeout_seconds=10.0,
            retry=RETRY,
            throttle=ThrottlePolicy(),  # production cool-downs, not the tests' fast ones
        )
        gate = asyncio.Semaphore(args.workers)
        started = time.monotonic()
        outcomes = await asyncio.gather(
            *(bring_up(cloud, i, gate, args.requeue) for i in remote.instance_ids)
        )
        elapsed = time.monotonic() - started
        received, created = remote.counters()
    finally:
        remote.stop()
    report(args, needed, elapsed, outcomes, received, created, cloud.metrics)


def report(
    args: argparse.Namespace,
    needed: dict[str, int],
    elapsed: float,
    outcomes: list[tuple[float, int]],
    received: int,
    created: int,
    metrics: ControllerMetrics,
) -> None:
    per_type = Counter(TYPES[i % len(TYPES)] for i in range(args.nodes))
    minimum = sum(needed[t] * n for t, n in per_type.items()) + len(per_type)
    lower = minimum / args.rate
    total = metrics.value(CALLS)
    calls = {
        action: metrics.value(CALLS, action=action)
        for action in sorted({s.labels["action"] for s in _samples(metrics, CALLS)})
    }
    times = sorted(t for t, _ in outcomes)
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"## Controller cloud benchmark: {args.nodes} instances")
    print()
    print(
        f"ECS rate limit {args.rate:g}/s, latency {args.latency * 1000:g} ms, attach/detach "
        f"{args.transition:g} s, {args.workers} reconcilers, client bucket "
        f"{args.rate * args.client_share:g}/s"
    )
    print()
    print("| figure | value |")
    print("| --- | --- |")
    print(f"| all instances Ready | {elapsed:.1f} s |")
    print(f"| lower bound ({minimum} calls / {args.rate:g} per s) | {lower:.1f} s |")
    print(f"| ratio to lower bound | {elapsed / lower:.2f} |")
    print(
        f"| median / p99 node Ready | {times[len(times) // 2]:.1f} s / "
        f"{times[min(len(times) - 1, int(0.99 * len(times)))]:.1f} s |"
    )
    print(f"| API calls per node (sent; ECS received {received}) | {total / args.nodes:.2f} |")
    minimum_by_type = ", ".join(f"{t}: {n}" for t, n in needed.items())
    print(f"| unbatchable calls per node by type | {minimum_by_type} |")
    print(f"| reconcile passes per node | {sum(p for _, p in outcomes) / args.nodes:.2f} |")
    print(f"| throttled by ECS | {metrics.value(THROTTLES):.0f} |")
    print(f"| client retries | {metrics.value(RETRIES):.0f} |")
    expected = per_type[GPU_TWO_CARDS.name]  # one new ERI per two-card node; card 0 converts
    print(f"| ERIs created (expected) | {created} ({expected}) |")
    print(f"| controller peak RSS | {rss_mib:.0f} MiB |")
    print()
    print(
        "calls per node by action: "
        + ", ".join(f"{a} {n / args.nodes:.3f}" for a, n in calls.items())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="simulated instances")
    parser.add_argument("--rate", type=float, default=100.0, help="ECS account calls/s")
    parser.add_argument("--latency", type=float, default=0.02, help="ECS latency per call (s)")
    parser.add_argument("--transition", type=float, default=1.0, help="attach time (s)")
    parser.add_argument("--workers", type=int, default=32, help="concurrent reconcilers")
    parser.add_argument("--requeue", type=float, default=1.0, help="requeue delay (s)")
    parser.add_argument(
        "--client-share",
        type=float,
        default=0.95,
        help="client token bucket as a fraction of the ECS limit",
    )
    args = parser.parse_args()
    if args.nodes < 1 or args.rate <= 0 or args.workers < 1:
        parser.error("--nodes and --workers must be >= 1 and --rate > 0")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
