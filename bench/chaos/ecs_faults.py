"""Cloud-side faults under the production controller: kills mid-call, 5xx, throttling, timeouts.

Every scenario runs the real controller in-process on the real kube-testserver, talking to the
ECS emulator over real HTTP through the official SDK with the production retry and throttle
policies (``bench.chaos.ecs_rig``). Nodes are GPU instances with two network cards (card 0:
the primary ENI converted, card 1: a created ERI) and single-card general-purpose ones.

- Kill: the controller dies while ECS holds one of its calls (never carried out, or carried
  out with the answer lost), the Node is deleted, the instance is released or keeps running,
  and a new controller starts. Held: zero leaked ERIs; a running instance's attached ERIs are
  kept and its next Node adopts them. Recovery: restart until nothing is leaked.
- 5xx, throttling, timeouts: nodes join while ECS misbehaves. Held: once it stops, every node
  is Ready with exactly one ERI per card, no duplicate, no leak. Recovery: fault stops until
  all that holds.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from bench.chaos.ecs_rig import Region, region, wait_whole
from bench.chaos.framework import Trials, scenario, stopwatch
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.audit import eris_on, leaked, ours
from tests.fakes.ecs.client import GENERAL_ERI, GPU_TWO_CARDS
from tests.fakes.ecs.records import InstanceRecord
from tests.integration.controller_rig import (
    delete_node,
    kill,
    object_gone,
    running_controller,
    start_controller,
    until,
)
from tests.integration.controller_support import add_node

# Every ECS call of a two-card node's first pass, in order.
STEPS = (
    "DescribeInstances",
    "DescribeInstanceTypes",
    "DescribeNetworkInterfaces",
    "ModifyNetworkInterfaceAttribute",
    "CreateNetworkInterface",
    "AttachNetworkInterface",
    "TagResources",
    "DescribeInstanceAttribute",
)
KILLS = [
    (step, done, released) for step in STEPS for done in (True, False) for released in (True, False)
]
SHORT_KILLS = [("CreateNetworkInterface", True, False), ("AttachNetworkInterface", True, True)]
SWEEPS = 1.0  # seconds: two orphan sweeps at the test interval


def hold(emu: EcsEmulator, action: str, instance_id: str, carried_out: bool) -> None:
    """Hold the instance's next call of ``action``: carried out with the answer held, or held
    and then refused without being carried out."""
    where = {"InstanceId": instance_id} if action == "DescribeNetworkInterfaces" else None
    if carried_out:
        emu.faults.inject(action, answer_delay=10, where=where)
    else:
        emu.faults.inject(action, "ServiceUnavailable", status=503, delay=10, where=where)


async def kill_trial(
    r: Region, action: str, carried_out: bool, released: bool
) -> tuple[str, float]:
    """One kill; returns why it did not hold ("" when it did) and the time to clean."""
    world = r.emu.world
    inst = world.add_instance(GPU_TWO_CARDS.name)
    fate = "released" if released else "running"
    label = f"{action} {'carried out' if carried_out else 'lost'}, instance {fate}"
    hold(r.emu, action, inst.id, carried_out)
    before = r.emu.faults.calls[action]
    controller = start_controller(r.kubeconfig, r.cloud())
    try:
        name = await add_node(r.k8s, inst)
        if await until(lambda: r.emu.faults.calls[action] > before, timeout=20) is None:
            return f"{label}: the controller never called {action}", 0.0
        await asyncio.sleep(0.2)  # ECS carries the call out
    finally:
        await kill(controller)
    r.emu.faults.clear()
    attached = eris_on(world, inst.id)
    await delete_node(r.k8s, name)
    if released:
        world.release_instance(inst.id)
    async with running_controller(r.kubeconfig, r.cloud()):
        with stopwatch() as elapsed:
            cleaned = await until(
                lambda: not leaked(world, inst.id) and not (released and ours(world, inst.id))
            )
            took = elapsed()
        if cleaned is None:
            return f"{label}: leaked {leaked(world, inst.id)}", 0.0
        await object_gone(r.k8s, name)
        if released:
            return "", took
        await asyncio.sleep(SWEEPS)
        if eris_on(world, inst.id) != attached:
            return f"{label}: attached ERIs {attached} became {eris_on(world, inst.id)}", 0.0
        again = await add_node(r.k8s, inst)
        why = await wait_whole(r, [(again, inst)], timeout=20)
        kept = set(attached.values()) - {inst.primary_eni_id}
        if not why and not kept <= {e.id for e in ours(world, inst.id)}:
            why = f"{label}: kept ERIs {kept} were replaced"
        await delete_node(r.k8s, again)  # leave the cluster empty for the next trial
        world.release_instance(inst.id)
        await until(lambda: not ours(world, inst.id))
        return (f"{label}: {why}" if why else ""), took


@scenario(
    "controller killed at every ECS step, Node deleted in between",
    area="controller",
    full=len(KILLS),
    short=len(SHORT_KILLS),
    holds="zero leaked ERIs; a running instance keeps its attached ERIs for its next Node",
)
async def killed_at_every_step(trials: Trials) -> None:
    points = SHORT_KILLS if trials.short else KILLS
    async with region() as r:
        for action, carried_out, released in points[: trials.count]:
            why, took = await kill_trial(r, action, carried_out, released)
            trials.check(not why, why, took)


Trouble = Callable[[EcsEmulator, random.Random], None]


async def storm(trials: Trials, trouble: Trouble, every: float, **cloud: float) -> None:
    """Nodes join while ``trouble`` strikes every ``every`` seconds; then it stops."""
    rng = random.Random(13)
    window = 2.0 if trials.short else 10.0
    per_type = 1 if trials.short else 3
    async with region() as r, running_controller(r.kubeconfig, r.cloud(**cloud)):
        for _ in range(trials.count):
            insts: list[InstanceRecord] = [
                r.emu.world.add_instance(t)
                for t in (GPU_TWO_CARDS.name, GENERAL_ERI.name)
                for _ in range(per_type)
            ]
            loop = asyncio.get_running_loop()
            end = loop.time() + window
            trouble(r.emu, rng)
            nodes = [(await add_node(r.k8s, inst), inst) for inst in insts]
            while loop.time() < end:
                await asyncio.sleep(every)
                trouble(r.emu, rng)
            r.emu.faults.clear()
            r.emu.faults.rate_limit = 0
            with stopwatch() as elapsed:
                why = await wait_whole(r, nodes, timeout=90)
                took = elapsed()
            trials.check(not why, why, took)
            for name, inst in nodes:  # the next trial starts from an empty cluster
                await delete_node(r.k8s, name)
                r.emu.world.release_instance(inst.id)
            await until(lambda: not ours(r.emu.world), timeout=30)


def server_errors(emu: EcsEmulator, rng: random.Random) -> None:
    code, status = rng.choice([("ServiceUnavailable", 503), ("InternalError", 500)])
    emu.faults.inject("*", code, status=status, times=3)


def throttling(emu: EcsEmulator, rng: random.Random) -> None:
    emu.faults.rate_limit = 3  # the account's calls per second, over all APIs
    emu.faults.throttle("*", times=rng.randint(2, 5))


def slow_answers(emu: EcsEmulator, rng: random.Random) -> None:
    # carried out at once, answered past the 0.5 s timeout: the answer is lost, the work done
    emu.faults.inject("*", answer_delay=rng.uniform(0.6, 1.2), times=2)


STORM_HOLDS = (
    "every node Ready with exactly its cards' ERIs; zero duplicates; zero leaks; no call "
    "refused for an ERI's state"
)


def _storm(trouble: Trouble, every: float, **cloud: float) -> Callable[[Trials], Awaitable[None]]:
    async def body(trials: Trials) -> None:
        await storm(trials, trouble, every, **cloud)

    return body


scenario("ECS 5xx bursts", area="controller", full=5, short=1, holds=STORM_HOLDS)(
    _storm(server_errors, every=0.3)
)
scenario("ECS throttling", area="controller", full=5, short=1, holds=STORM_HOLDS)(
    _storm(throttling, every=0.5)
)
scenario("ECS timeouts", area="controller", full=5, short=1, holds=STORM_HOLDS)(
    _storm(slow_answers, every=0.3, timeout_seconds=0.5)
)
