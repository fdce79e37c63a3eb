"""ECS transport benchmark: what an ECS call costs the controller's process over HTTPS, with the
SDK's own transport (a new session and SSL context per call) and with the client's shared
session (``erdma.controller.providers.ecs.transport``), side by side.

Run: `.venv/bin/python -m bench.bench_ecs_transport --calls 2000`.

The emulator serves HTTPS, with a certificate from a test CA, from a process of its own, so
its CPU is not counted; the client trusts certifi's bundle plus that CA, so it loads what it
loads in production. Each transport is measured on a fresh ``EcsCloud`` (the production client,
DescribeInstanceAttribute via ``jumbo_frame``), after a warm-up, at 1 and at 16 concurrent
callers. Printed: this process's CPU per call (``time.process_time``) and the wall time per
call, with the load average before and after (the machine is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from unittest import mock

from bench.proc import loadavg
from erdma.controller.providers.ecs import client as ecs_client
from erdma.controller.providers.ecs.client import EcsCloud
from erdma.controller.ratelimit import RetryPolicy
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GENERAL_ERI, cloud_for, standard_world
from tests.fakes.ecs.tls import EmulatorTls, make_tls, trusted_as_certifi

WARM_UP = 20
CALLERS = (1, 16)
#: transport name -> the SDK client class ``EcsCloud`` is built on
TRANSPORTS = {
    "session per call (SDK)": ecs_client.SdkClient,
    "shared session": ecs_client.EcsClient,
}


def _serve(tls: EmulatorTls, conn: Connection) -> None:
    """Child process: serve a region with one instance over HTTPS until told to stop."""
    emulator = EcsEmulator(standard_world(), tls=tls.server_context())
    instance = emulator.world.add_instance(GENERAL_ERI.name).id
    with emulator.in_thread():
        conn.send((emulator.port, instance))
        conn.recv()  # "stop"


class RemoteEmulator:
    """The endpoint of an emulator in a child process, addressable like a local one."""

    def __init__(self, tls: EmulatorTls) -> None:
        self._conn, child = multiprocessing.Pipe()
        self._proc = multiprocessing.Process(target=_serve, args=(tls, child), daemon=True)
        self._proc.start()
        port, self.instance = self._conn.recv()
        self.endpoint = f"127.0.0.1:{port}"
        self.world = standard_world()  # region name only; the state lives in the child

    def stop(self) -> None:
        self._conn.send("stop")
        self._proc.join(10)


@dataclass(frozen=True)
class Figures:
    """One transport at one concurrency."""

    transport: str
    callers: int
    cpu_ms: float
    wall_ms: float


def new_cloud(remote: RemoteEmulator, sdk_client: Any) -> EcsCloud:
    """The production ``EcsCloud`` over HTTPS, built on ``sdk_client``, without rate limit."""
    with mock.patch.object(ecs_client, "EcsClient", sdk_client):
        return cloud_for(
            remote,  # type: ignore[arg-type]  # duck-typed: endpoint + world.region
            rate_limit=1e9,
            timeout_seconds=10.0,
            retry=RetryPolicy(max_attempts=1),
            protocol="HTTPS",
        )


async def measure(cloud: EcsCloud, instance: str, calls: int, callers: int) -> tuple[float, float]:
    """(CPU, wall) ms per call of ``calls`` calls made by ``callers`` concurrent callers."""
    each = calls // callers

    async def caller() -> None:
        for _ in range(each):
            await cloud.jumbo_frame(instance)

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    done = each * callers
    return (time.process_time() - cpu) * 1000 / done, (time.perf_counter() - wall) * 1000 / done


async def run(remote: RemoteEmulator, calls: int) -> list[Figures]:
    figures = []
    for callers in CALLERS:
        for name, sdk_client in TRANSPORTS.items():
            cloud = new_cloud(remote, sdk_client)
            for _ in range(WARM_UP):
                await cloud.jumbo_frame(remote.instance)
            cpu_ms, wall_ms = await measure(cloud, remote.instance, calls, callers)
            if sdk_client is ecs_client.EcsClient:
                await cloud.close()
            figures.append(Figures(name, callers, cpu_ms, wall_ms))
    return figures


def report(calls: int, figures: list[Figures], load_before: str, load_after: str) -> None:
    print(f"## ECS transport benchmark: {calls} DescribeInstanceAttribute calls over HTTPS")
    print()
    print(f"loadavg before {load_before}, after {load_after}")
    print()
    print("| transport | callers | CPU ms/call | wall ms/call |")
    print("| --- | ---: | ---: | ---: |")
    for f in figures:
        print(f"| {f.transport} | {f.callers} | {f.cpu_ms:.2f} | {f.wall_ms:.2f} |")
    print()
    for callers in CALLERS:
        own, shared = (f for f in figures if f.callers == callers)
        print(
            f"{callers} caller(s): the shared session takes {shared.cpu_ms / own.cpu_ms:.1%} of "
            f"the CPU and {shared.wall_ms / own.wall_ms:.1%} of the wall time per call"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per transport and load")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        tls = make_tls(Path(directory))
        remote = RemoteEmulator(tls)
        try:
            load_before = loadavg()
            with trusted_as_certifi(tls.ca_bundle):
                figures = asyncio.run(run(remote, args.calls))
            load_after = loadavg()
        finally:
            remote.stop()
    report(args.calls, figures, load_before, load_after)


if __name__ == "__main__":
    main()
