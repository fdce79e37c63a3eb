"""Kubelet and agent-process faults against the real `erdma agent` on a simulated node.

Kubelet wipes its device-plugins directory whenever it starts, may stay away for a while, and
the agent itself can be SIGKILLed (an OOM kill, a node drain gone wrong) or run twice during a
rollout overlap. After each fault the node must be whole again (see `agent_node.whole`): both
resources registered anew and listing every device Healthy. Recovery is the time until then.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

from bench.chaos.agent_node import (
    ERDMA,
    describe,
    kill,
    recovered,
    running_node,
    spawn_agent,
    whole,
    wipe,
)
from bench.chaos.framework import Trials, scenario
from erdma.sim.node import SimulatedNode

RECOVERY_BOUND = 10.0  # seconds a trial may take to be whole again
# problem lines (warnings, errors) one kubelet absence may log, whatever its length: the
# socket deleted, registration refused once per resource, the directory changed once more
AWAY_LOG_BUDGET = 6


def alive(node: SimulatedNode) -> bool:
    return node.process is not None and node.process.returncode is None


@scenario(
    "kubelet dir wiped (slow)",
    area="agent",
    full=100,
    short=3,
    holds="after each wipe (files, or the whole directory) both resources re-register "
    "listing every device Healthy",
)
async def wiped_slowly(trials: Trials) -> None:
    async with running_node() as node:
        for index in range(trials.count):
            began = await wipe(node.kubelet, whole_dir=index % 2 == 1)
            took = await recovered(node, began, RECOVERY_BOUND)
            trials.check(
                took is not None and alive(node),
                f"wipe {index}: not whole within {RECOVERY_BOUND} s: {describe(node.kubelet)}",
                took,
            )


@scenario(
    "kubelet dir wiped (storm)",
    area="agent",
    full=100,
    short=10,
    holds="wipes every 20-50 ms: the agent lives through each, and is whole after the last",
)
async def wiped_in_a_storm(trials: Trials) -> None:
    pace = random.Random(13)
    async with running_node() as node:
        for index in range(trials.count - 1):
            await wipe(node.kubelet, whole_dir=index % 5 == 4)
            await asyncio.sleep(pace.uniform(0.02, 0.05))
            trials.check(alive(node), f"the agent exited during wipe {index}")
        began = await wipe(node.kubelet)
        took = await recovered(node, began, RECOVERY_BOUND)
        trials.check(
            took is not None and alive(node),
            f"not whole within {RECOVERY_BOUND} s of the storm: {describe(node.kubelet)}",
            took,
        )


def problem_lines(log: str) -> list[str]:
    """The warning and error lines of a JSON agent log."""
    lines = []
    for line in log.splitlines():
        try:
            level = json.loads(line).get("level")
        except ValueError:
            level = "unparsed"  # a traceback or a stray print is a problem too
        if level != "info" and level != "debug":
            lines.append(line)
    return lines


@scenario(
    "kubelet away 60 s",
    area="agent",
    full=3,
    short=1,
    holds=f"kubelet gone 60 s (short: 2 s) with its sockets: the agent waits, logs at most "
    f"{AWAY_LOG_BUDGET} problem lines, and is whole once kubelet is back",
)
async def kubelet_away(trials: Trials) -> None:
    away = 2.0 if trials.short else 60.0
    async with running_node() as node:
        for index in range(trials.count):
            logged = len(node.agent_log())
            began = await wipe(node.kubelet, away=away)
            took = await recovered(node, began, RECOVERY_BOUND)
            noise = problem_lines(node.agent_log()[logged:])
            trials.check(
                took is not None and alive(node) and len(noise) <= AWAY_LOG_BUDGET,
                f"absence {index}: whole={took is not None}, alive={alive(node)}, "
                f"{len(noise)} problem lines (budget {AWAY_LOG_BUDGET}): {noise[:3]}",
                took,
            )


def plugin_sockets(node: SimulatedNode) -> list[str]:
    return sorted(
        p.name for p in node.kubelet.plugin_dir.glob("*.sock") if p.name != "kubelet.sock"
    )


@scenario(
    "agent SIGKILL",
    area="agent",
    full=20,
    short=2,
    holds="killed -9 and started again: registered within 10 s, no stale lock or socket in the way",
)
async def agent_sigkill(trials: Trials) -> None:
    async with running_node() as node:
        for index in range(trials.count):
            assert node.process is not None
            await kill(node.process)
            began = time.monotonic()
            logged = len(node.agent_log())
            await node.start(kubelet=False)  # what the DaemonSet controller does
            took = await recovered(node, began, RECOVERY_BOUND)
            waited = "waiting for it to stop" in node.agent_log()[logged:]
            sockets = plugin_sockets(node)
            trials.check(
                took is not None and not waited and len(sockets) == 2,
                f"restart {index}: whole={took is not None}, waited on a lock={waited}, "
                f"sockets={sockets}: {describe(node.kubelet)}",
                took,
            )


@scenario(
    "two agents",
    area="agent",
    full=5,
    short=1,
    holds="a second agent on the node waits on the lock, takes over when the first exits "
    "(SIGTERM or SIGKILL), and the node always ends with aliyun/erdma",
)
async def two_agents(trials: Trials) -> None:
    async with running_node() as node:
        assert node.process is not None
        first = node.process
        try:
            for index in range(trials.count):
                first = await _hand_over(trials, node, first, index)
        finally:
            node.process = first  # the one still serving is stopped with the node
        if not whole(node.kubelet, 0):
            trials.failed(f"the node ended without its resources: {describe(node.kubelet)}")


async def _hand_over(
    trials: Trials, node: SimulatedNode, first: asyncio.subprocess.Process, index: int
) -> asyncio.subprocess.Process:
    """Start a second agent, stop the first once the second waits; returns the one serving."""
    log = node.root / f"agent-{index}.log"
    before = len(node.kubelet.registrations)
    second = await spawn_agent(node, log)
    try:
        await _waiting(log)
    except TimeoutError as exc:
        await kill(second)
        trials.failed(f"handover {index}: {exc}")
        return first
    both = len(node.kubelet.registrations) - before  # registrations while both ran: none
    began = time.monotonic()
    if index % 2 == 0:
        first.terminate()
    else:
        first.kill()
    await first.wait()
    took = await recovered(node, began, RECOVERY_BOUND)
    endpoint = node.kubelet.endpoints.get(ERDMA)
    by_second = endpoint is not None and endpoint.registration.endpoint in _read(log)
    trials.check(
        took is not None and by_second and both == 0 and second.returncode is None,
        f"handover {index} ({'SIGTERM' if index % 2 == 0 else 'SIGKILL'}): whole="
        f"{took is not None}, served by the second agent={by_second}, registrations while "
        f"both ran={both}: {describe(node.kubelet)}",
        took,
    )
    return second


async def _waiting(log: Path, timeout: float = 20.0) -> None:
    """Until the second agent says it waits for the lock, so the handover really is tested."""
    deadline = time.monotonic() + timeout
    while _read(log).count("waiting for it to stop") < 2:  # one line per resource
        if time.monotonic() > deadline:
            raise TimeoutError(f"the second agent never waited on the lock: {_read(log)[-600:]}")
        await asyncio.sleep(0.05)


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""
