"""A simulated node: a fixture host, the fake kubelet, and the real agent as a process.

Used by `erdma sim` and by the integration tests, so both exercise exactly what a node runs:
the `erdma agent` program, talking gRPC over unix sockets to something that behaves like kubelet.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from erdma.aio import AsyncService
from erdma.sim import fakehost
from erdma.sim.kubelet import FakeKubelet


def agent_command(host_root: Path, kubelet_dir: Path, *args: str) -> list[str]:
    """`erdma agent` as a simulated node runs it on ``host_root`` and ``kubelet_dir``: metrics
    off, a rescan every 0.2 s, no node preparation, devices found on the host itself; ``args``
    come last, so a flag given there wins."""
    return [
        sys.executable,
        "-m",
        "erdma",
        "agent",
        "--host-root",
        str(host_root),
        "--kubelet-dir",
        str(kubelet_dir),
        "--metrics-port",
        "0",
        "--rescan-interval",
        "0.2",
        "--no-prepare-node",
        "--local-eri-discovery",
        *args,
    ]


class SimulatedNode(AsyncService):
    def __init__(
        self,
        root: Path,
        spec: fakehost.HostSpec | str = "default",
        agent_args: Sequence[str] = (),
    ) -> None:
        self.root = root
        self.host_root = root / "host"
        self.kubelet_dir = root / "kubelet"
        self.log_path = root / "agent.log"
        self.host = fakehost.build(self.host_root, spec)
        self.kubelet = FakeKubelet(self.kubelet_dir / "device-plugins")
        self.agent_args = list(agent_args)
        self.process: asyncio.subprocess.Process | None = None

    def agent_argv(self) -> list[str]:
        return agent_command(self.host_root, self.kubelet_dir, *self.agent_args)

    async def start(self, kubelet: bool = True) -> None:
        if kubelet:
            await self.kubelet.start()
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child process
        try:
            self.process = await asyncio.create_subprocess_exec(
                *self.agent_argv(), stdout=log, stderr=log, env={**os.environ}
            )
        finally:
            log.close()

    async def stop(self) -> int | None:
        """Stop kubelet first (as a node shutdown does), then the agent; returns its exit code."""
        await self.kubelet.stop()
        code = None
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                code = await asyncio.wait_for(self.process.wait(), 10)
            if self.process.returncode is None:
                self.process.kill()
                code = await self.process.wait()
        elif self.process is not None:
            code = self.process.returncode
        return code

    async def wait_registered(self, resource: str, timeout: float = 30.0) -> None:
        await self.kubelet.wait_for(
            lambda: self.kubelet.latest(resource) is not None,
            timeout,
            f"{resource} registered and listed; agent log:\n{self.agent_log()}",
        )

    def capacity_by_numa(self, resource: str) -> dict[str, tuple[int, int]]:
        """{NUMA node or "none": (capacity, allocatable)} from the last ListAndWatch message."""
        endpoint = self.kubelet.endpoint(resource)
        assert endpoint.stream is not None and endpoint.stream.messages
        capacity: Counter[str] = Counter()
        healthy: Counter[str] = Counter()
        for device in endpoint.stream.messages[-1].devices:
            nodes = ",".join(str(n.ID) for n in device.topology.nodes) or "none"
            capacity[nodes] += 1
            healthy[nodes] += device.health == "Healthy"
        return {node: (capacity[node], healthy[node]) for node in sorted(capacity)}

    def agent_log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""
