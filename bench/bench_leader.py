"""Leader election timings against the real test API server: how soon a cut-off leader stops,
and how soon a standby takes over a lease whose holder went silent.

Run: `.venv/bin/python -m bench.bench_leader --rounds 5`.

The tests (tests/integration/test_leader_*.py) check the order of these events (the old leader
stops before the standby starts; no takeover before the lease ran out); the times are
measured here. Each round uses a fresh Lease, a lease duration of 5 s (renewDeadline 3.33 s,
retryPeriod 0.67 s) and a `CuttableProxy` between the elector and kube-testserver.

* yield: the proxy refuses and resets connections; from the cut until the elector's work is
  cancelled and it no longer says it leads. Bound: renewDeadline after the last renew.
* takeover: a second elector stands by while the first holds; the first is cancelled without
  releasing (a crash); from then until the standby's work starts. Bound: the lease duration
  after the standby last saw the Lease change, plus one retry period.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from lightkube import AsyncClient, KubeConfig

from erdma.kube.leader import LeaderElector
from tests.fakes.kubeapi import KubeApiServer
from tests.integration.proxy_support import CuttableProxy, proxied_kubeconfig

NAMESPACE = "kube-system"
DURATION = 5.0


async def _running(started: asyncio.Event) -> None:
    started.set()
    await asyncio.Event().wait()


async def yield_time(api: KubeApiServer) -> float:
    proxy = CuttableProxy(api.port)
    await proxy.start()
    client = AsyncClient(KubeConfig.from_dict(proxied_kubeconfig(api, proxy)))
    elector = LeaderElector(client, NAMESPACE, f"bench-{uuid.uuid4().hex[:6]}", "a", DURATION)
    started = asyncio.Event()
    runner = asyncio.create_task(elector.run(lambda: _running(started)))
    try:
        await asyncio.wait_for(started.wait(), 60)
        await proxy.cut()
        cut = time.monotonic()
        while elector.is_leader:
            await asyncio.sleep(0.01)
        return time.monotonic() - cut
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await client.close()
        await proxy.close()


async def takeover_time(api: KubeApiServer) -> float:
    client = AsyncClient(KubeConfig.from_file(api.kubeconfig))
    name = f"bench-{uuid.uuid4().hex[:6]}"
    a = LeaderElector(client, NAMESPACE, name, "a", DURATION)
    b = LeaderElector(client, NAMESPACE, name, "b", DURATION)
    a_started, b_started = asyncio.Event(), asyncio.Event()
    a_run = asyncio.create_task(a.run(lambda: _running(a_started)))
    await asyncio.wait_for(a_started.wait(), 60)
    b_run = asyncio.create_task(b.run(lambda: _running(b_started)))
    try:
        await asyncio.sleep(DURATION / 2)  # b has seen a renew the lease a few times
        a.release = _no_release  # type: ignore[method-assign]  # a crash: nothing released
        a_run.cancel()
        await asyncio.gather(a_run, return_exceptions=True)
        crashed = time.monotonic()
        await asyncio.wait_for(b_started.wait(), 60)
        return time.monotonic() - crashed
    finally:
        b_run.cancel()
        await asyncio.gather(b_run, return_exceptions=True)
        await client.close()


async def _no_release() -> None:
    return None


async def run(rounds: int) -> None:
    with KubeApiServer.start() as api:
        yields = [await yield_time(api) for _ in range(rounds)]
        takeovers = [await takeover_time(api) for _ in range(rounds)]
    renew_deadline, retry = DURATION * 2 / 3, DURATION * 2 / 15
    print(f"lease {DURATION:.0f} s, renewDeadline {renew_deadline:.2f} s, retry {retry:.2f} s")
    for what, times, bound in (
        ("API cut -> leader's work stopped", yields, renew_deadline),
        ("holder crashed -> standby leads", takeovers, DURATION + retry),
    ):
        print(
            f"{what}: median {statistics.median(times):.2f} s, max {max(times):.2f} s "
            f"(bound {bound:.2f} s; {rounds} rounds)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(run(parser.parse_args().rounds))


if __name__ == "__main__":
    main()
