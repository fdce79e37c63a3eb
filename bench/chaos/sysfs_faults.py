"""Malformed sysfs: every file the scanner reads, with every fault of `sysfs_cases.FAULTS`.

Two variants. In-process (`sysfs_cases`, run as a child): each file x fault against `scan`,
every case one trial. Agent process: a sample of the same faults under the real `erdma agent`
serving kubelet: no ListAndWatch stream may end, the other devices stay listed and Healthy,
the bad device is Healthy, Unhealthy or skipped with a logged reason, and once the file is
restored kubelet gets exactly its first lists again.

Permission denied is a real EACCES: as root both variants run without CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH (`setpriv`), so a mode-000 file refuses root as it would any user.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.chaos.agent_node import ERDMA, HCA, describe, running_node
from bench.chaos.framework import Trials, scenario
from bench.chaos.sysfs_cases import apply, restore, without_dac_override
from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.host.devices import scan
from erdma.sim.kubelet import FakeKubelet
from erdma.sim.node import SimulatedNode

CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2
SETTLE = 1.0  # seconds for five rescans to reach kubelet
RECOVERY_BOUND = 10.0


@dataclass(frozen=True)
class AgentCase:
    """One fault under the agent: ``file`` is relative to the device's sysfs directory, or
    ``uverbs/<name>`` for its uverbs node's, or ``net/<name>`` for its netdev's."""

    device: str
    file: str
    fault: str

    @property
    def resource(self) -> str:
        return HCA if self.device.startswith("mlx5") else ERDMA


AGENT_CASES = (
    AgentCase("erdma_0", "device/numa_node", "huge"),
    AgentCase("erdma_0", "uverbs/ibdev", "permission denied"),
    AgentCase("erdma_0", "ports/1/state", "garbage"),
    AgentCase("erdma_1", "ports/1/state", "symlink loop"),
    AgentCase("erdma_0", "node_guid", "non-UTF-8"),
    AgentCase("erdma_1", "uverbs/dev", "garbage"),
    AgentCase("erdma_0", "device/vendor", "empty"),
    AgentCase("erdma_0", "net/address", "garbage"),
    AgentCase("mlx5_0", "device/numa_node", "huge"),
    AgentCase("mlx5_0", "ports/1/state", "permission denied"),
    AgentCase("mlx5_0", "uverbs/ibdev", "symlink loop"),
    AgentCase("erdma_1", "ports/1/phys_state", "non-UTF-8"),
)
#: the short run (make test) takes every agent case too: with two of them a device left out
#: without a word (its MAC unreadable) went unnoticed until a full run
SHORT_AGENT_CASES = len(AGENT_CASES)


class DacLessNode(SimulatedNode):
    """The agent without the capabilities that let root read a file of mode 000."""

    def agent_argv(self) -> list[str]:
        return [*(without_dac_override() or []), *super().agent_argv()]


def mode_bits_apply(pid: int) -> bool:
    """Whether process ``pid`` is refused by mode bits (not root, or root without the DAC
    capabilities)."""
    if os.geteuid() != 0:
        return True
    status = Path(f"/proc/{pid}/status").read_text()
    effective = int(
        next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff")), 16
    )
    return not effective & (1 << CAP_DAC_OVERRIDE | 1 << CAP_DAC_READ_SEARCH)


async def in_process_cases(short: bool) -> list[tuple[str, str | None]]:
    """(case, why not held) for each file x fault, from the `sysfs_cases` child."""
    prefix = without_dac_override()
    if prefix is None:
        return [("permission denied", "cannot drop root's DAC override here: no setpriv")]
    argv = [*prefix, sys.executable, "-m", "bench.chaos.sysfs_cases", *(["--sample"] * short)]
    child = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await child.communicate()
    results = [(r["case"], r["why"]) for r in map(json.loads, out.decode().splitlines())]
    if child.returncode != 0 or not results:
        results.append(("the case runner", f"exit {child.returncode}: {err.decode()[-800:]}"))
    return results


def listed(kubelet: FakeKubelet) -> dict[str, pb.ListAndWatchResponse | None]:
    """The last list of each resource kubelet received (with topology and health)."""
    lists = {}
    for resource in (ERDMA, HCA):
        stream = kubelet.endpoints[resource].stream if resource in kubelet.endpoints else None
        lists[resource] = stream.messages[-1] if stream and stream.messages else None
    return lists


def path_of(node: SimulatedNode, case: AgentCase) -> str:
    """The file of ``case`` on the node's host, relative to the host root."""
    device = scan(node.host_root).by_name(case.device)
    assert device is not None, f"{case.device} is not on the fixture host"
    kind, _, name = case.file.partition("/")
    if kind == "uverbs":
        return f"sys/class/infiniband_verbs/{device.uverbs.path.rpartition('/')[2]}/{name}"
    if kind == "net":
        return f"sys/class/net/{device.netdev}/{name}"
    return f"sys/class/infiniband/{case.device}/{case.file}"


def explained(log: str, device: str) -> bool:
    """Whether the agent logged why ``device`` is out or Unhealthy since the fault."""
    for line in log.splitlines():
        record = json.loads(line)
        names = [record.get("device"), *record.get("hcas", ())]
        if device in names and record.get("reason"):
            return True
    return False


def bad_device_state(latest: dict[str, str], case: AgentCase) -> str:
    """ "Healthy", "Unhealthy" or "absent": how kubelet now sees the device of ``case``."""
    if case.resource == HCA:
        states = set(latest.values())
    else:
        states = {h for i, h in latest.items() if i.startswith(f"{case.device}/")}
    if not states:
        return "absent"
    return "Healthy" if states == {"Healthy"} else "Unhealthy"


async def agent_case(node: SimulatedNode, case: AgentCase, trials: Trials) -> None:
    before, streams = listed(node.kubelet), dict(node.kubelet.endpoints)
    logged = len(node.agent_log())
    rel = path_of(node, case)
    saved = apply(node.host_root / rel, case.fault)
    try:
        await asyncio.sleep(SETTLE)
        problems = []
        for resource, endpoint in streams.items():
            now = node.kubelet.endpoints.get(resource)
            if now is not endpoint or endpoint.stream is None or not endpoint.stream.open:
                problems.append(f"the {resource} stream ended")
        latest = node.kubelet.latest(ERDMA) or {}
        others = {i: h for i, h in latest.items() if not i.startswith(f"{case.device}/")}
        if len(others) < 4 or set(others.values()) != {"Healthy"}:
            problems.append(f"the other eRDMA device is not listed Healthy: {others}")
        state = bad_device_state(node.kubelet.latest(case.resource) or {}, case)
        if state != "Healthy" and not explained(node.agent_log()[logged:], case.device):
            problems.append(f"{case.device} is {state} and no log line says why")
    finally:
        restore(saved)
    began = time.monotonic()
    try:
        await node.kubelet.wait_for(lambda: listed(node.kubelet) == before, RECOVERY_BOUND)
        took: float | None = time.monotonic() - began
    except TimeoutError:
        took = None
        problems.append(f"not back to the first lists after the restore: {describe(node.kubelet)}")
    trials.check(not problems, f"agent, {rel}: {case.fault}: {'; '.join(problems)}", took)


@scenario(
    "malformed sysfs",
    area="agent",
    full=len(AGENT_CASES),
    short=SHORT_AGENT_CASES,
    holds="every file the scan reads x garbage/empty/1 MiB/non-UTF-8/EACCES/ELOOP: no raise, "
    "other devices intact, bad one skipped or Unhealthy with a reason; the agent's streams "
    "never end and the device comes back",
)
async def malformed_sysfs(trials: Trials) -> None:
    sample = AGENT_CASES[: trials.count]
    results = await in_process_cases(trials.short)
    # a trial per case: the in-process ones are found by tracing a scan, so they are counted here
    trials.count = len(results) + len(sample)
    for case, why in results:
        trials.check(why is None, f"in process, {case}: {why}")
    async with running_node(node_type=DacLessNode) as node:
        assert node.process is not None
        if not mode_bits_apply(node.process.pid):
            trials.failed("the agent runs with CAP_DAC_OVERRIDE: permission denied is not real")
        for agent in sample:
            await agent_case(node, agent, trials)
