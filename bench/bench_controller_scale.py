"""Controller scale benchmark: the full controller brings N Nodes' ERIs to Ready, with a watch cut.

Run: `.venv/bin/python -m bench.bench_controller_scale --nodes 5000`.

Unlike bench_controller_cloud (which drives ``ensure_eris`` directly), this runs the production
controller (``run_controller``: the kopf operator, the work queue with its production worker
count or ``--reconcile-workers``, ERdmaDevice objects) in a spawned child process of its own, so
its RSS and CPU are its own (its clock starts before the child's interpreter and imports). The
pieces are bench_controller_cloud's: the same mixed fleet served by the ECS emulator in another
child process, the same rate limit and client bucket, and the same lower bound (the calls one
node of each type cannot share, measured by ``calibrate``, over the rate limit).

The Nodes are created in a real test API server (kube-testserver on etcd) before the controller
starts, so the creation rate of the test server does not set the pace; the clock starts with the
controller. The controller reaches the API server through a ``CuttableProxy`` in a process of
its own (``bench.proxy_process``, so the harness's work never stalls it): when half the
nodes are Ready every connection is reset and the port refuses connections for
``--cut-seconds`` (an API-server restart as the controller's watches see it), then reopens.

Printed: time to all Ready against the bound; median / p99 / max node Ready (from the
controller's start, seen by a watch of the ERdmaDevices straight to the API server); ECS
calls, reconciles, throttles and retries read from the controller's ``/metrics``; ERIs created
against those expected (a duplicate would show there and in the ERdmaDevice device counts);
the controller's peak RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import tempfile
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.models.core_v1 import NodeSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from lightkube.types import on_error_retry
from prometheus_client.parser import text_string_to_metric_families

from bench.bench_controller_cloud import RETRY, TYPES, RemoteEmulator, Scenario, calibrate
from bench.proxy_process import ProxyProcess
from bench.stats import pct
from erdma.controller.config import parse_config
from erdma.controller.main import run_controller
from erdma.controller.ratelimit import ThrottlePolicy
from erdma.kube import crd
from erdma.kube.client import ERdmaDeviceResource
from tests.fakes.ecs.client import GPU_TWO_CARDS, cloud_for
from tests.fakes.kubeapi import KubeApiServer, install_crd
from tests.fakes.ports import free_port
from tests.integration.controller_support import set_ready
from tests.integration.proxy_support import proxied_kubeconfig

DEVICES = {GPU_TWO_CARDS.name: 2}  # ERIs per node by type; every other type has one


def _controller(
    kubeconfig: str, endpoint: str, rate: float, port: int, workers: int | None, conn: Connection
) -> None:
    """Child process: the production controller, its ECS bucket ``rate`` calls/s, and
    ``workers`` reconcile workers (None: the production default)."""
    remote = SimpleNamespace(endpoint=endpoint, world=SimpleNamespace(region="cn-hangzhou"))
    cloud = cloud_for(
        remote,  # type: ignore[arg-type]  # duck-typed: endpoint + world.region
        rate_limit=rate,
        burst=max(1.0, rate / 10),
        timeout_seconds=10.0,
        retry=RETRY,
        throttle=ThrottlePolicy(),
    )
    settings: dict[str, object] = {"region": "cn-hangzhou", "healthPort": port}
    if workers is not None:
        settings["reconcileWorkers"] = workers
    config = parse_config(settings)

    async def serve() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(
            run_controller(config, cloud, kubeconfig=kubeconfig, leader_elect=False, stop=stop)
        )
        await asyncio.to_thread(conn.recv)  # "stop"
        stop.set()
        await asyncio.wait({task}, timeout=30)

    asyncio.run(serve())


async def create_nodes(client: AsyncClient, ids: list[str], concurrency: int) -> list[str]:
    """One Ready Node per instance, as kubelet registers them; their names."""
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int, instance_id: str) -> str:
        name = f"scale-{i:05d}"
        node = Node(
            metadata=ObjectMeta(name=name),
            spec=NodeSpec(providerID=f"cn-hangzhou.{instance_id}"),
        )
        async with gate:
            await client.create(node)
            await set_ready(client, name, True, "")
        return name

    return await asyncio.gather(*(one(i, x) for i, x in enumerate(ids)))


async def watch_ready(
    client: AsyncClient, wanted: dict[str, int], started: float, seen: dict[str, float]
) -> None:
    """Record when each ERdmaDevice is first all Ready; count the most devices each one held.

    A watch of every ERdmaDevice straight to the API server (not through the proxy), so the
    cut does not blind it; lightkube resumes it from the last resourceVersion it saw.
    """
    async for _, obj in client.watch(ERdmaDeviceResource, on_error=on_error_retry):
        dev = crd.parse(obj.to_dict())
        wanted[dev.name] = max(wanted.get(dev.name, 0), len(dev.devices))
        if dev.all_ready and dev.name not in seen:
            seen[dev.name] = time.monotonic() - started


async def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The controller's /metrics, as (sample name, sorted labels) -> value."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        text = await response.text()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    return sum(v for (n, _), v in metrics.items() if n == name)


def by_label(
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, label: str
) -> Counter[str]:
    out: Counter[str] = Counter()
    for (n, labels), v in metrics.items():
        if n == name:
            out[dict(labels)[label]] += int(v)
    return out


async def reopen(proxy: ProxyProcess) -> float:
    """Listen on the proxy's port again; seconds spent waiting for the port to be free.

    An outgoing connection may have taken the (ephemeral) port meanwhile, as can happen to a
    restarted API server too; the outage then lasts until it is free.
    """
    started = time.monotonic()
    while True:
        try:
            await proxy.start()
            return time.monotonic() - started
        except OSError:
            await asyncio.sleep(0.5)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def run(args: argparse.Namespace, server: KubeApiServer) -> None:
    needed = await calibrate(args.transition)
    await install_crd(server.kubeconfig)
    remote = RemoteEmulator(Scenario(args.nodes, args.rate, args.latency, args.transition))
    client = AsyncClient(KubeConfig.from_file(server.kubeconfig))
    proxy = ProxyProcess(server.port)
    t0 = time.monotonic()
    names = await create_nodes(client, remote.instance_ids, args.create_concurrency)
    creating = time.monotonic() - t0
    print(f"{len(names)} Nodes created in {creating:.1f} s ({len(names) / creating:.0f}/s)")
    with tempfile.TemporaryDirectory(prefix="erdma-scale-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(proxied_kubeconfig(server, proxy)))
        port = free_port()
        # spawn, not fork: a forked child would count the pages it shares with this process
        # (which has just created every Node) in its RSS, and the controller runs alone
        spawn = multiprocessing.get_context("spawn")
        conn, child = spawn.Pipe()
        proc = spawn.Process(
            target=_controller,
            args=(
                str(kubeconfig),
                remote.endpoint,
                args.rate * args.client_share,
                port,
                args.reconcile_workers,
                child,
            ),
            daemon=True,
        )
        started = time.monotonic()
        proc.start()
        seen: dict[str, float] = {}
        devices: dict[str, int] = {}
        watcher = asyncio.create_task(watch_ready(client, devices, started, seen))
        cut_at = outage = None
        while len(seen) < len(names) and time.monotonic() - started < args.timeout:
            if watcher.done():
                watcher.result()  # the watch failed: raise its error rather than time out
            if args.cut_seconds > 0 and cut_at is None and len(seen) >= len(names) // 2:
                cut_at = time.monotonic() - started
                await proxy.cut()
                await asyncio.sleep(args.cut_seconds)
                outage = await reopen(proxy) + args.cut_seconds
            await asyncio.sleep(0.5)
        elapsed = time.monotonic() - started
        await asyncio.sleep(2)  # let the last passes record their metrics
        metrics = await scrape(port)
        rss = peak_rss_mib(proc.pid or 0)
        conn.send("stop")
        proc.join(30)
        watcher.cancel()
    received, created = remote.counters()
    remote.stop()
    await proxy.close()
    await client.close()
    per_type = Counter(TYPES[i % len(TYPES)] for i in range(args.nodes))
    minimum = sum(needed[t] * n for t, n in per_type.items()) + len(per_type)
    expected_devices = {n: DEVICES.get(TYPES[i % len(TYPES)], 1) for i, n in enumerate(names)}
    extra = sum(1 for n, want in expected_devices.items() if devices.get(n, 0) > want)
    times = sorted(seen.values())
    bound = minimum / args.rate
    calls = total(metrics, "erdma_controller_ecs_calls_total")
    print(f"## Controller scale benchmark: {args.nodes} Nodes, full controller")
    print()
    print(
        f"ECS rate limit {args.rate:g}/s, latency {args.latency * 1000:g} ms, attach "
        f"{args.transition:g} s, client bucket {args.rate * args.client_share:g}/s; "
        f"API connections cut at {cut_at if cut_at is None else round(cut_at, 1)} s for "
        f"{outage if outage is None else round(outage, 1)} s"
    )
    print()
    print("| figure | value |")
    print("| --- | --- |")
    print(f"| Nodes Ready | {len(seen)} / {len(names)} |")
    print(f"| all Ready (from controller start) | {elapsed:.1f} s |")
    print(f"| bound ({minimum} calls / {args.rate:g} per s) | {bound:.1f} s |")
    print(f"| ratio to bound | {elapsed / bound:.2f} |")
    # the full controller also reads each instance's jumbo-frame setting, one call per node
    # that no batch form exists for (DescribeInstanceAttribute); bench_controller_cloud, which
    # drives ensure_eris alone, does not
    with_jumbo = (minimum + args.nodes) / args.rate
    print(
        f"| bound with one DescribeInstanceAttribute per node ({minimum + args.nodes} calls) | "
        f"{with_jumbo:.1f} s, ratio {elapsed / with_jumbo:.2f} |"
    )
    if times:
        p99 = pct(times, 0.99)
        print(
            f"| median / p99 / max node Ready | {times[len(times) // 2]:.1f} / {p99:.1f} / "
            f"{times[-1]:.1f} s (p99 {p99 / bound:.2f}x bound) |"
        )
    print(f"| ECS calls per node (/metrics; ECS received {received}) | {calls / args.nodes:.2f} |")
    reconciles = by_label(metrics, "erdma_controller_reconciles_total", "result")
    print(f"| reconciles by result | {dict(sorted(reconciles.items()))} |")
    print(f"| throttled by ECS | {total(metrics, 'erdma_controller_ecs_throttles_total'):.0f} |")
    print(f"| client retries | {total(metrics, 'erdma_controller_ecs_retries_total'):.0f} |")
    print(f"| ERIs created (expected) | {created} ({per_type[GPU_TWO_CARDS.name]}) |")
    print(f"| ERdmaDevices with more devices than ERIs the type needs | {extra} |")
    print(f"| controller peak RSS (VmHWM) | {rss:.0f} MiB |")
    actions = by_label(metrics, "erdma_controller_ecs_calls_total", "action")
    print()
    print(
        "calls per node by action: "
        + ", ".join(f"{a} {n / args.nodes:.3f}" for a, n in sorted(actions.items()))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000, help="simulated instances and Nodes")
    parser.add_argument("--rate", type=float, default=100.0, help="ECS account calls/s")
    parser.add_argument("--latency", type=float, default=0.02, help="ECS latency per call (s)")
    parser.add_argument("--transition", type=float, default=1.0, help="attach time (s)")
    parser.add_argument("--client-share", type=float, default=0.95, help="bucket / ECS limit")
    parser.add_argument("--cut-seconds", type=float, default=5.0, help="API outage (s); 0: none")
    parser.add_argument("--create-concurrency", type=int, default=16, help="Node creators")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after (s)")
    parser.add_argument(
        "--reconcile-workers", type=int, help="the controller's reconcileWorkers (default: its own)"
    )
    args = parser.parse_args()
    if args.nodes < 2 or args.rate <= 0:
        parser.error("--nodes must be >= 2 and --rate > 0")
    with KubeApiServer.start() as server:
        asyncio.run(run(args, server))


if __name__ == "__main__":
    main()
