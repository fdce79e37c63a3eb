"""Unary RPCs against the agent's device-plugin socket from many processes at once.

Each caller is its own process with its own gRPC channel (blocking stub, one call in flight),
so the client side scales with the callers instead of one Python process being the bottleneck.
The same processes run every phase in turn, a barrier starting each: the no-op floor
(GetDevicePluginOptions) and Allocate are measured the same way, in the same run.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import grpc

from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.api.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc

FLOOR = "GetDevicePluginOptions"
ALLOCATE = "Allocate"
#: how long a phase may take before the benchmark gives up on its callers
PHASE_TIMEOUT = 300.0


@dataclass(frozen=True)
class Phase:
    method: str  # FLOOR or ALLOCATE
    callers: int  # the first `callers` processes take part
    calls: int  # per caller


@dataclass(frozen=True)
class PhaseResult:
    phase: Phase
    samples_ms: list[float]
    calls_per_s: float  # every caller's calls over the span from first start to last end

    def pct(self, q: float) -> float:
        ordered = sorted(self.samples_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _caller(
    index: int,
    socket: str,
    device_id: str,
    phases: list[Phase],
    barrier: Barrier,
    out: Queue[tuple[float, float, list[float]]],
) -> None:
    """One caller process: a warm channel, then its share of every phase it takes part in."""
    channel = grpc.insecure_channel(f"unix://{socket}")
    grpc.channel_ready_future(channel).result(timeout=30)
    stub = pb_grpc.DevicePluginStub(channel)
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=[device_id])]
    )
    calls = {
        FLOOR: lambda: stub.GetDevicePluginOptions(pb.Empty()),
        ALLOCATE: lambda: stub.Allocate(request),
    }
    for call in calls.values():  # first calls pay for lazy set-up on both sides
        call()
    for phase in phases:
        barrier.wait(PHASE_TIMEOUT)
        if index >= phase.callers:
            continue
        call = calls[phase.method]
        samples = []
        began = time.monotonic()  # CLOCK_MONOTONIC: comparable between processes
        for _ in range(phase.calls):
            started = time.perf_counter()
            call()
            samples.append((time.perf_counter() - started) * 1000)
        out.put((began, time.monotonic(), samples))
    channel.close()


def run_phases(socket: Path, device_id: str, phases: list[Phase]) -> list[PhaseResult]:
    """Start one process per caller (as many as the largest phase), run `phases` in order."""
    context = multiprocessing.get_context("spawn")  # never fork a process that runs gRPC
    processes = max(p.callers for p in phases)
    barrier = context.Barrier(processes + 1)
    out: Queue[tuple[float, float, list[float]]] = context.Queue()
    workers = [
        context.Process(
            target=_caller, args=(i, str(socket), device_id, phases, barrier, out), daemon=True
        )
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    results = []
    try:
        for phase in phases:
            barrier.wait(PHASE_TIMEOUT)
            reports = [out.get(timeout=PHASE_TIMEOUT) for _ in range(phase.callers)]
            span = max(r[1] for r in reports) - min(r[0] for r in reports)
            samples = [s for r in reports for s in r[2]]
            results.append(PhaseResult(phase, samples, len(samples) / span))
    except (queue.Empty, threading.BrokenBarrierError):
        for worker in workers:
            worker.kill()
        raise
    for worker in workers:
        worker.join(30)
    return results
