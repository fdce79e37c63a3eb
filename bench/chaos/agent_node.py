"""The node the agent-side fault scenarios break: a fixture host, the fake kubelet, and the real
`erdma agent` program as a child process, serving both of its resources.

"Whole" is what every agent scenario waits for after a fault: kubelet holds a registration of
each resource made since the fault, its ListAndWatch stream is open, and the last list is
exactly the devices the host has, all Healthy. The time until then is the recovery time.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from erdma.agent.shared_config import SharedResourceConfig
from erdma.sim.kubelet import FakeKubelet
from erdma.sim.node import SimulatedNode

ERDMA, HCA = "aliyun/erdma", "rdma/hca"
SLOTS = 4
#: an eRDMA node with one Mellanox HCA as well, so both plugins are served and must recover
HOST = "mlx5"
AGENT_ARGS = ("--slots-per-device", str(SLOTS), "--resources", "aliyun/erdma,shared")
EXPECTED: dict[str, frozenset[str]] = {
    ERDMA: frozenset(f"erdma_{d}/{s}" for d in (0, 1) for s in range(SLOTS)),
    HCA: frozenset(f"hca-{i}" for i in range(SharedResourceConfig().capacity)),
}


def whole(kubelet: FakeKubelet, since: float) -> bool:
    """Every resource registered at or after ``since`` (monotonic), streaming its full list."""
    for resource, ids in EXPECTED.items():
        endpoint = kubelet.endpoints.get(resource)
        if endpoint is None or endpoint.registration.at < since:
            return False
        stream = endpoint.stream
        if stream is None or not stream.open or stream.latest is None:
            return False
        if stream.latest.keys() != ids or set(stream.latest.values()) != {"Healthy"}:
            return False
    return True


def describe(kubelet: FakeKubelet) -> str:
    """What kubelet holds, for a failed trial's message."""
    parts = []
    for resource in EXPECTED:
        endpoint = kubelet.endpoints.get(resource)
        if endpoint is None:
            parts.append(f"{resource}: not registered")
            continue
        stream = endpoint.stream
        listed = stream.latest if stream is not None else None
        healthy = sum(h == "Healthy" for h in (listed or {}).values())
        state = "no stream" if stream is None else ("open" if stream.open else "closed")
        parts.append(f"{resource}: stream {state}, {healthy}/{len(listed or {})} Healthy")
    return "; ".join(parts)


async def recovered(node: SimulatedNode, since: float, timeout: float) -> float | None:
    """Seconds from ``since`` until the node is whole, or None when it is not within timeout."""
    try:
        await node.kubelet.wait_for(lambda: whole(node.kubelet, since), timeout)
    except TimeoutError:
        return None
    return time.monotonic() - since


def remove_files(plugin_dir: Path) -> None:
    """What kubelet does to its directory when it starts: every file goes, directories stay
    (and so do the agents' lock directories); its checkpoint is written again on start."""
    for entry in plugin_dir.iterdir():
        if not entry.is_dir():
            entry.unlink(missing_ok=True)


async def wipe(kubelet: FakeKubelet, *, whole_dir: bool = False, away: float = 0.0) -> float:
    """Kubelet stops, its directory is wiped (every file, or with ``whole_dir`` the directory
    itself, as a node clean-up does), and after ``away`` seconds it serves again; returns the
    monotonic time it came back, from which recovery is measured."""
    await kubelet.stop()
    if whole_dir:
        shutil.rmtree(kubelet.plugin_dir, ignore_errors=True)
    else:
        remove_files(kubelet.plugin_dir)
    await asyncio.sleep(away)
    back = time.monotonic()
    kubelet.generation += 1
    await kubelet.start()
    return back


async def spawn_agent(node: SimulatedNode, log: Path) -> asyncio.subprocess.Process:
    """Another `erdma agent` with the node's arguments (a second DaemonSet pod, a restart)."""
    with open(log, "ab") as out:
        return await asyncio.create_subprocess_exec(*node.agent_argv(), stdout=out, stderr=out)


async def kill(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    await process.wait()


@asynccontextmanager
async def running_node(
    spec: str = HOST, extra_args: Sequence[str] = (), node_type: type[SimulatedNode] = SimulatedNode
) -> AsyncIterator[SimulatedNode]:
    """A node whose agent is registered and whole; stopped and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="chaos-", dir="/tmp"))  # unix socket paths stay short
    node = node_type(root, spec, [*AGENT_ARGS, *extra_args])
    try:
        started = time.monotonic()
        await node.start()
        if await recovered(node, started, 30) is None:
            raise RuntimeError(
                f"the agent never became whole ({describe(node.kubelet)}); log:\n"
                + node.agent_log()[-3000:]
            )
        yield node
    finally:
        await node.stop()
        shutil.rmtree(root, ignore_errors=True)
