"""Allocate: the agent's server CPU per call against a minimal Python plugin's, in one run.

Run: `.venv/bin/python -m bench.bench_allocate_cpu` (`--rounds`, `--calls`, `--callers`).
The agent runs as `erdma sim` starts it, on the memory goal's node (3 eRDMA devices x 1,000
slots + an mlx5 HCA for `rdma/hca`, metrics on), with rescans every 60 s so the background
scan does not count as Allocate's. `bench.minimal_plugin` serves the agent's own Allocate
answer from a second process (checked equal before measuring). Each round sends the same
Allocates (`bench.agent_load`: caller processes, one call in flight each) to both servers at
once, each call for the next of a device's 1,000 slots, as kubelet gives each pod a free one.
At once, so whatever else loads the shared machine loads both alike: one after the other, two
identical servers differed by up to 20 % in a round, and the agent-first/minimal-first order
moved the median ratio by 0.4. Each server and its callers run on a CPU of their own, the two
CPUs swapped every round: sharing both CPUs, the four busy processes moved between them 10 times
as often for one server as for the other, and two runs of the same code gave medians 0.1 apart.
A server's CPU is user + system time from `/proc/<pid>/stat`, read at the phase's barriers,
over the calls made; the median of the rounds' ratios is reported, with the load average.
`--calibrate` puts a second minimal plugin in the agent's place: what the method itself reads
between two identical servers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import grpc

from bench.agent_load import ALLOCATE, Phase, run_phases
from bench.bench_agent import ERDMA, SHARED, big_host, started
from bench.proc import cpu_seconds, loadavg
from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.api.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from erdma.deviceplugin.server import accepts_connections

#: every slot of one device: kubelet gives each pod a free slot, and all of them get the same
#: answer, so the minimal plugin's one answer stays the agent's for every call
SLOTS = [f"erdma_0/{n}" for n in range(1000)]


@dataclass(frozen=True)
class Round:
    agent_us: float  # server CPU per call, microseconds
    minimal_us: float

    @property
    def ratio(self) -> float:
        return self.agent_us / self.minimal_us


def per_call_us(socket: str, pid: int, callers: int, calls: int, cpu: int | None) -> float:
    """The server's CPU per Allocate, in microseconds, over `calls` calls from `callers`;
    the server and its callers on CPU `cpu` alone when one is given."""
    phase = Phase(ALLOCATE, callers, max(1, calls // callers))
    allowed = os.sched_getaffinity(0)
    if cpu is not None:
        pin(pid, cpu)
        os.sched_setaffinity(0, {cpu})  # this thread: the caller processes it starts inherit it
    try:
        (result,) = run_phases(socket, SLOTS, [phase], cpu=lambda: cpu_seconds(pid))
    finally:
        os.sched_setaffinity(0, allowed)
    assert result.server_cpu is not None
    return result.server_cpu / result.total_calls * 1e6


def pin(pid: int, cpu: int) -> None:
    """Every thread of process `pid` onto CPU `cpu` (one that ended meanwhile is skipped)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            os.sched_setaffinity(int(task.name), {cpu})


def two_cpus() -> tuple[int, int] | None:
    """The first two CPUs this process may use, or None where it may use only one."""
    allowed = sorted(os.sched_getaffinity(0))
    return (allowed[0], allowed[1]) if len(allowed) > 1 else None


async def minimal_plugin(
    root: Path, answer: pb.ContainerAllocateResponse
) -> tuple[asyncio.subprocess.Process, str]:
    """The minimal plugin serving `answer`, once it accepts connections on its socket."""
    answer_file, socket = root / "answer.json", root / "minimal.sock"
    answer_file.write_text(answer_json(answer))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.minimal_plugin", str(socket), str(answer_file)
    )
    for _ in range(300):
        if socket.exists() and accepts_connections(socket):
            return process, str(socket)
        await asyncio.sleep(0.05)
    process.kill()
    raise RuntimeError(f"minimal plugin did not serve {socket}")


def answer_json(answer: pb.ContainerAllocateResponse) -> str:
    """The answer as the plain data `bench.minimal_plugin` builds it from."""
    return json.dumps(
        {
            "envs": dict(answer.envs),
            "devices": [
                {
                    "container_path": d.container_path,
                    "host_path": d.host_path,
                    "permissions": d.permissions,
                }
                for d in answer.devices
            ],
            "mounts": [
                {
                    "container_path": m.container_path,
                    "host_path": m.host_path,
                    "read_only": m.read_only,
                }
                for m in answer.mounts
            ],
            "annotations": dict(answer.annotations),
            "cdi_devices": [{"name": c.name} for c in answer.cdi_devices],
        }
    )


async def allocate(socket: str, slot: str = SLOTS[0]) -> pb.AllocateResponse:
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=[slot])]
    )
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        return await pb_grpc.DevicePluginStub(channel).Allocate(request, timeout=10)


async def run(rounds: int, calls: int, callers: int, calibrate: bool) -> list[Round]:
    with tempfile.TemporaryDirectory(prefix="bench-cpu-", dir="/tmp") as tmp:
        root = Path(tmp)
        args = ["--slots-per-device", "1000", "--resources", f"{ERDMA},shared"]
        args += ["--rescan-interval", "60"]
        node, _, _ = await started(root / "node", big_host(3, 1), args, [ERDMA, SHARED])
        assert node.process is not None
        agent_socket = str(node.kubelet.endpoint(ERDMA).path)
        answer = await allocate(agent_socket)
        minimal, minimal_socket = await minimal_plugin(root, answer.container_responses[0])
        stop = [minimal]
        agent_pid = node.process.pid
        if calibrate:  # a second minimal plugin in the agent's place
            (root / "second").mkdir()
            second, agent_socket = await minimal_plugin(
                root / "second", answer.container_responses[0]
            )
            stop.append(second)
            agent_pid = second.pid
        try:
            others = [await allocate(agent_socket, SLOTS[-1]), await allocate(minimal_socket)]
            if others != [answer, answer]:  # another slot of the agent's, and the minimal's
                raise RuntimeError("the minimal plugin's answer differs from the agent's")
            results = []
            cpus = two_cpus()
            for n in range(rounds):  # both at once: whatever else loads the machine, loads both
                agent_cpu, minimal_cpu = (
                    (cpus if n % 2 == 0 else cpus[::-1]) if cpus else (None, None)
                )
                agent, minimal_us = await asyncio.gather(
                    asyncio.to_thread(
                        per_call_us, agent_socket, agent_pid, callers, calls, agent_cpu
                    ),
                    asyncio.to_thread(
                        per_call_us, minimal_socket, minimal.pid, callers, calls, minimal_cpu
                    ),
                )
                results.append(Round(agent, minimal_us))
        finally:
            for process in stop:
                process.kill()
                await process.wait()
            await node.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=6000, help="Allocates per server per round")
    parser.add_argument("--callers", type=int, default=1, help="caller processes")
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="measure a second minimal plugin in the agent's place: the method's own bias",
    )
    args = parser.parse_args()
    before = loadavg()
    results = asyncio.run(run(args.rounds, args.calls, args.callers, args.calibrate))
    print(f"load average: {before} at start, {loadavg()} at end")
    print(f"{args.callers} caller(s), {args.calls} Allocates per server per round")
    print("| round | agent CPU per call | minimal plugin | ratio |\n| --- | --- | --- | --- |")
    for n, r in enumerate(results, 1):
        print(f"| {n} | {r.agent_us:.0f} us | {r.minimal_us:.0f} us | {r.ratio:.2f} |")
    ratios = [r.ratio for r in results]
    print(f"| median | | | **{statistics.median(ratios):.2f}** (max {max(ratios):.2f}) |")


if __name__ == "__main__":
    main()
