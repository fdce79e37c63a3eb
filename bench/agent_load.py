"""Unary RPCs against the agent's device-plugin socket from many processes at once.

Each caller is its own process with its own gRPC channel (blocking stub, one call in flight),
so the client side scales with the callers instead of one Python process being the bottleneck.
The same processes run every phase in turn, a barrier starting each: the no-op floor
(GetDevicePluginOptions) and Allocate are measured the same way, in the same run. Given a
`cpu` reader (the server's CPU seconds), each phase also records the server CPU it cost, read
at the barriers around it, so channel set-up and warm-up calls are left out.

A caller keeps its timings until every phase is over and reports them after a last barrier:
a caller that reported as soon as it finished (a multiprocessing queue put, or its process
exiting) stalled the agent's remaining callers for up to a second on this 2-core machine,
which showed up as a p99 tail of 0.3-1.2 s that no kubelet would see.
"""

from __future__ import annotations

import itertools
import multiprocessing
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import grpc

from bench.stats import pct
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


#: one call: (start, end) in CLOCK_MONOTONIC seconds, comparable between processes
Call = tuple[float, float]


@dataclass(frozen=True)
class PhaseResult:
    phase: Phase
    calls: list[list[Call]]  # per caller, in the order it made them
    server_cpu: float | None = None  # seconds of the server's CPU over the phase, if read

    @property
    def total_calls(self) -> int:
        return sum(len(c) for c in self.calls)

    @property
    def calls_per_s(self) -> float:
        """Every caller's calls over the span from the first start to the last end."""
        span = max(c[-1][1] for c in self.calls) - min(c[0][0] for c in self.calls)
        return self.total_calls / span

    def pct(self, q: float) -> float:
        """The `q` quantile of the phase's call latencies, in milliseconds."""
        return pct([(end - start) * 1000 for mine in self.calls for start, end in mine], q)


def _caller(
    index: int,
    socket: str,
    device_ids: Sequence[str],
    phases: list[Phase],
    barrier: Barrier,
    out: Queue[tuple[int, list[list[Call]]]],
) -> None:
    """One caller process: a warm channel, then its share of every phase it takes part in;
    its Allocates ask for `device_ids` one per call in turn, starting at its own offset."""
    channel = grpc.insecure_channel(f"unix://{socket}")
    grpc.channel_ready_future(channel).result(timeout=30)
    stub = pb_grpc.DevicePluginStub(channel)
    requests = itertools.cycle(
        pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[i])])
        for i in [*device_ids[index:], *device_ids[:index]]
    )
    calls = {
        FLOOR: lambda: stub.GetDevicePluginOptions(pb.Empty()),
        ALLOCATE: lambda: stub.Allocate(next(requests)),
    }
    for call in calls.values():  # first calls pay for lazy set-up on both sides
        call()
    made: list[list[Call]] = []  # per phase taken part in
    for phase in phases:
        barrier.wait(PHASE_TIMEOUT)
        if index >= phase.callers:
            continue
        call = calls[phase.method]
        mine: list[Call] = []
        for _ in range(phase.calls):
            started = time.monotonic()
            call()
            mine.append((started, time.monotonic()))
        made.append(mine)
    barrier.wait(PHASE_TIMEOUT)  # report only once every phase is over: see the module doc
    channel.close()
    out.put((index, made))


def run_phases(
    socket: Path | str,
    device_ids: Sequence[str],
    phases: list[Phase],
    cpu: Callable[[], float] | None = None,
) -> list[PhaseResult]:
    """Start one process per caller (as many as the largest phase), run `phases` in order;
    `cpu` (the server's CPU seconds so far), when given, is read at every phase boundary.
    Each Allocate asks for one of `device_ids`, in turn, as kubelet hands out a different free
    slot to each pod."""
    context = multiprocessing.get_context("spawn")  # never fork a process that runs gRPC
    processes = max(p.callers for p in phases)
    barrier = context.Barrier(processes + 1)
    out: Queue[tuple[int, list[list[Call]]]] = context.Queue()
    workers = [
        context.Process(
            target=_caller, args=(i, str(socket), device_ids, phases, barrier, out), daemon=True
        )
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    marks: list[float] = []  # the server's CPU at each phase boundary
    try:
        for _ in range(len(phases) + 1):  # each phase's start, then the last one's end
            barrier.wait(PHASE_TIMEOUT)
            marks.append(cpu() if cpu is not None else 0.0)
        reports = dict(out.get(timeout=PHASE_TIMEOUT) for _ in workers)
    except (queue.Empty, threading.BrokenBarrierError):
        for worker in workers:
            worker.kill()
        raise
    for worker in workers:
        worker.join(30)
    return [
        PhaseResult(
            phase,
            [reports[i][taken(phases[:n], i)] for i in range(phase.callers)],
            marks[n + 1] - marks[n] if cpu is not None else None,
        )
        for n, phase in enumerate(phases)
    ]


def taken(earlier: list[Phase], index: int) -> int:
    """How many of the `earlier` phases caller `index` took part in."""
    return sum(index < p.callers for p in earlier)
