"""SIGTERM, SIGINT and SIGHUP to the real `erdma agent` and `erdma controller` processes.

Each signal must stop the program through its shutdown path: exit code 0 and no traceback;
the agent removes its plugin sockets, the leading controller releases its Lease (a standby
takes over at once). SIGHUP (a closed terminal) used to kill the agent on the spot, leaving
its sockets, and a leader's SIGTERM ended in a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from contextlib import AsyncExitStack
from pathlib import Path

from lightkube.resources.coordination_v1 import Lease

from bench.chaos.agent_node import running_node
from bench.chaos.apiserver_faults import ControllerProcess, backdrop
from bench.chaos.framework import Trials, scenario, stopwatch
from tests.integration.controller_support import eventually

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
ERDMA = "aliyun/erdma"


def _order(trials: Trials) -> list[signal.Signals]:
    """The signals of ``trials.count`` trials, every signal before any repeats."""
    return [SIGNALS[i % len(SIGNALS)] for i in range(trials.count)]


#: how long a signalled controller may take to exit before the trial fails (its grace period
#: in a pod is 30 s)
EXIT_WITHIN = 60


def judge(trials: Trials, sig: signal.Signals, code: int, log: str, left: str, took: float) -> None:
    """One trial: held when the exit code is 0, ``log`` has no traceback and nothing was
    ``left`` behind (a socket, a held Lease: "" when nothing)."""
    problems = [
        f"exit code {code}" if code != 0 else "",
        "a traceback was logged" if "Traceback" in log else "",
        left,
    ]
    why = "; ".join(f"{sig.name}: {p}" for p in problems if p)
    trials.check(not why, why, took)


@scenario(
    "agent sent SIGTERM / SIGINT / SIGHUP",
    area="agent",
    full=6,
    short=3,
    holds="exit code 0; no traceback; plugin sockets removed",
)
async def agent_signals(trials: Trials) -> None:
    for sig in _order(trials):
        async with running_node() as node:
            assert node.process is not None
            socket = Path(node.kubelet.endpoint(ERDMA).path)
            with stopwatch() as elapsed:
                node.process.send_signal(sig)
                code = await asyncio.wait_for(node.process.wait(), 60)
                took = elapsed()
            left = "the plugin socket was left behind" if socket.exists() else ""
            judge(trials, sig, code, node.agent_log(), left, took)


@scenario(
    "leading controller sent SIGTERM / SIGINT / SIGHUP",
    area="controller",
    full=6,
    short=3,
    holds="exit code 0; no traceback; the Lease released",
)
async def controller_signals(trials: Trials) -> None:
    async with AsyncExitStack() as stack:
        base = await backdrop(stack)
        for index, sig in enumerate(_order(trials)):
            trial = base.work / f"trial-{index}"
            trial.mkdir()
            controller = ControllerProcess(trial, base.api.kubeconfig, base.emu.endpoint)
            await controller.start()
            try:
                await eventually(controller.leading, timeout=60)
                assert controller.process is not None
                with stopwatch() as elapsed:
                    controller.process.send_signal(sig)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(controller.process.wait(), EXIT_WITHIN)
                    code, took = controller.process.returncode, elapsed()
            finally:
                await controller.stop()
            log = (trial / "controller.log").read_text(errors="replace")
            if code is None:  # what it was doing, for whoever reads the failure
                tail = " | ".join(log.strip().splitlines()[-5:])
                trials.check(False, f"{sig.name}: running {EXIT_WITHIN} s on; log ends: {tail}")
                continue
            lease = await base.client.get(Lease, controller.lease_name, namespace="default")
            holder = lease.spec.holderIdentity if lease.spec else None
            held = f"the Lease is still held by {holder}" if holder else ""
            judge(trials, sig, code, log, held, took)
