"""After ``Throttling.User`` the throttled API rests for every reconcile at once.

Many reconciles run against one ``EcsCloud``. Each used to retry a throttled call on its own
backoff, 0-0.4 s later, so the API was hit again from all of them within a fraction of a
second and stayed throttled. Here the real SDK talks to the ECS emulator and the emulator's
call log shows when each call arrived.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from erdma.controller.providers.ecs.client import EcsCloud
from erdma.controller.ratelimit import RetryPolicy, ThrottlePolicy
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GENERAL_ERI, cloud_for, standard_world
from tests.waiting import until

RECONCILES = 8
ACTION = "DescribeNetworkInterfaces"
RETRY = RetryPolicy(max_attempts=6, base_delay=0.2, max_delay=10.0)  # the production policy


@pytest.fixture
async def emu() -> AsyncIterator[EcsEmulator]:
    async with EcsEmulator(standard_world()) as emulator:
        yield emulator


def arrivals(emu: EcsEmulator, action: str) -> list[tuple[float, str]]:
    return [(r.at, r.code) for r in emu.faults.log if r.action == action]


def record_rests(cloud: EcsCloud) -> list[float]:
    """The rest the shared throttle gate chose after each throttle, in order: what the policy
    decided, whatever the machine's load adds before the next call goes out."""
    rests: list[float] = []
    throttled = cloud.throttle.throttled

    def recording(action: str, started: float) -> float:
        rest = throttled(action, started)
        rests.append(rest)
        return rest

    cloud.throttle.throttled = recording  # type: ignore[method-assign]
    return rests


async def test_a_throttled_api_rests_for_every_caller_then_is_probed_once(emu) -> None:
    ids = [emu.world.add_instance(GENERAL_ERI.name).id for _ in range(RECONCILES)]
    cloud = cloud_for(emu, retry=RETRY, throttle=ThrottlePolicy())
    emu.faults.throttle(ACTION, times=RECONCILES)  # every reconcile's first call is refused

    listed = await asyncio.gather(*(cloud.list_enis(i) for i in ids))

    assert [len(enis) for enis in listed] == [1] * RECONCILES  # each found its primary ENI
    calls = arrivals(emu, ACTION)
    refused = [at for at, code in calls if code == "Throttling.User"]
    assert len(refused) == RECONCILES
    first_refusal, later = refused[0], [at for at, code in calls if not code]
    # No call within the first second of the cool-down (its minimum)...
    assert min(later) - first_refusal >= 0.95, [round(t - first_refusal, 2) for t in later]
    # ...then one probe; the others follow only once it has been answered.
    probe, *rest = sorted(later)
    assert all(at > probe for at in rest)
    assert cloud.throttle.cooling(ACTION) == 0


async def test_repeated_throttles_lengthen_the_rest_and_a_success_ends_it(emu) -> None:
    record = emu.world.add_instance(GENERAL_ERI.name)
    policy = ThrottlePolicy(initial=0.2, maximum=5.0, probe_interval=0.05)
    quick = RetryPolicy(max_attempts=6, base_delay=0.001, max_delay=0.01)  # for 5xx, not these
    cloud = cloud_for(emu, retry=quick, throttle=policy)
    emu.faults.throttle(ACTION, times=3)

    rests = record_rests(cloud)
    await cloud.list_enis(record.id)

    # rests of [0.2, 0.4], [0.4, 0.8], [0.8, 1.6] s: never below initial, each throttle
    # doubles the ceiling ...
    bounds = [(0.2, 0.4), (0.4, 0.8), (0.8, 1.6)]
    assert all(low <= rest <= high for rest, (low, high) in zip(rests, bounds, strict=True))
    # ... and the API really rested that long before the next call (load only adds to it)
    times = [at for at, _ in arrivals(emu, ACTION)]
    assert all(b - a >= rest for (a, b), rest in zip(itertools.pairwise(times), rests, strict=True))
    assert cloud.metrics.value("erdma_controller_ecs_retries_total") == 3

    rests.clear()
    emu.faults.throttle(ACTION, times=1)
    await cloud.list_enis(record.id)  # after the success the ladder starts again at the bottom
    assert len(rests) == 1 and 0.2 <= rests[0] <= 0.4, rests


async def test_a_throttle_of_one_api_does_not_hold_the_others(emu) -> None:
    record = emu.world.add_instance(GENERAL_ERI.name)
    # a rest of 30-60 s: longer than anything else here takes, however loaded the machine
    cloud = cloud_for(emu, retry=RETRY, throttle=ThrottlePolicy(initial=60.0, maximum=60.0))
    emu.faults.throttle(ACTION, times=1)
    listing = asyncio.create_task(cloud.list_enis(record.id))
    await until(lambda: cloud.throttle.cooling(ACTION) > 0, what="the list call was refused")

    found = await cloud.find_instance(instance_id=record.id)  # another API: not held
    assert found is not None and found.id == record.id
    assert not listing.done() and cloud.throttle.cooling(ACTION) > 0  # the list still rests
    listing.cancel()
    await asyncio.gather(listing, return_exceptions=True)


async def test_calls_waiting_for_the_rate_limit_also_wait_out_a_throttle(emu) -> None:
    """Jumbo-frame reads of many Nodes queue at the client's rate limit; one is throttled. The
    reads queued behind it had passed the cool-down check before the throttle, and used to go
    out as soon as the rate limit let them: the API was called again within 0.1 s."""
    ids = [emu.world.add_instance(GENERAL_ERI.name).id for _ in range(RECONCILES)]
    cloud = cloud_for(emu, rate_limit=10.0, burst=1, retry=RETRY, throttle=ThrottlePolicy())
    clock = cloud.throttle.clock
    sent: list[float] = []  # when each read left the client
    send = cloud._client.describe_instance_attribute_with_options_async

    async def sending(request: Any, runtime: Any) -> Any:
        sent.append(clock())
        return await send(request, runtime)

    cloud._client.describe_instance_attribute_with_options_async = sending
    cool_downs: list[tuple[float, float]] = []  # (when the throttle was taken in, the rest)
    throttled = cloud.throttle.throttled

    def recording(action: str, started: float) -> float:
        rest = throttled(action, started)
        cool_downs.append((clock(), rest))
        return rest

    cloud.throttle.throttled = recording  # type: ignore[method-assign]
    emu.faults.throttle("DescribeInstanceAttribute", times=1)

    await asyncio.gather(*(cloud.jumbo_frame(i) for i in ids))

    ((struck, rest),) = cool_downs
    later = [at - struck for at in sent if at > struck]
    assert later and all(after >= rest for after in later), (rest, later)


async def test_the_first_rest_after_a_throttle_is_at_least_the_initial_cool_down(emu) -> None:
    record = emu.world.add_instance(GENERAL_ERI.name)
    cloud = cloud_for(emu, retry=RETRY, throttle=ThrottlePolicy())
    rests = record_rests(cloud)
    emu.faults.throttle(ACTION, times=1)
    await cloud.list_enis(record.id)
    (rest,) = rests
    assert ThrottlePolicy().initial <= rest <= 2 * ThrottlePolicy().initial
