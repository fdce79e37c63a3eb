"""The per-API cool-down after ECS throttling, on a simulated clock."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest

from erdma.controller.ratelimit import ThrottleGate, ThrottlePolicy


class Clock:
    """Simulated time: ``sleep`` moves it forward instead of waiting."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def gate(clock: Clock, **policy: float) -> ThrottleGate:
    return ThrottleGate(
        ThrottlePolicy(**policy), rng=random.Random(7), clock=clock, sleep=clock.sleep
    )


async def test_callers_wait_out_the_rest_then_go_one_per_probe_interval() -> None:
    clock = Clock()
    g = gate(clock, initial=2.0, maximum=60.0, probe_interval=1.0)
    hold = g.throttled("CreateNetworkInterface", started=clock.now - 0.1)
    assert 2.0 <= hold <= 4.0  # never below initial
    struck = clock.now

    admitted: list[float] = []

    async def caller() -> None:
        await g.wait("CreateNetworkInterface")
        admitted.append(clock.now - struck)

    await asyncio.gather(*(caller() for _ in range(3)))
    assert admitted[0] == pytest.approx(hold)
    assert [round(b - a, 6) for a, b in itertools.pairwise(admitted)] == [1.0, 1.0]
    assert await g.wait("DescribeInstances") == 0.0  # another API is not held


async def test_each_throttle_doubles_the_rest_and_a_success_resets_it() -> None:
    clock = Clock()
    g = gate(clock, initial=1.0, maximum=4.0, probe_interval=0.5)
    holds = []
    for _ in range(4):
        await g.wait("A")
        clock.now += 0.01  # the probe's round trip
        holds.append(g.throttled("A", started=clock.now - 0.005))
    for hold, (low, high) in zip(holds, [(1, 2), (2, 4), (2, 4), (2, 4)], strict=True):
        assert low <= hold <= high

    await g.wait("A")
    started = clock.now
    clock.now += 0.01
    g.succeeded("A", started)
    assert g.cooling("A") == 0.0
    assert g.throttled("A", started=clock.now) <= 2.0  # back at the bottom of the ladder


async def test_answers_to_calls_already_in_flight_do_not_count() -> None:
    clock = Clock()
    g = gate(clock, initial=1.0, maximum=60.0, probe_interval=1.0)
    before = clock.now
    clock.now += 0.05
    first = g.throttled("A", started=before)
    # Seven more calls sent before the first answer came back are refused too: one strike.
    for _ in range(7):
        assert g.throttled("A", started=before) <= first
    assert g.cooling("A") <= 2.0
    g.succeeded("A", started=before)  # an old call answering late does not end the rest
    assert g.cooling("A") > 0


async def test_a_throttle_after_a_caller_passed_the_gate_is_seen_by_that_caller() -> None:
    clock = Clock()
    g = gate(clock)
    await g.wait("A")
    passed = clock.now
    assert not g.struck_since("A", passed)
    clock.now += 0.3  # the caller waits for the rate limit meanwhile
    g.throttled("A", started=passed - 0.1)
    assert g.struck_since("A", passed) and not g.struck_since("A", clock.now)
    assert not g.struck_since("B", passed)


@pytest.mark.parametrize(
    "policy",
    [
        {"initial": 0.0},
        {"initial": 5.0, "maximum": 1.0},
        {"probe_interval": 0.0},
    ],
)
def test_bad_cool_down_values_are_named(policy: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"throttle cool-down initial=.*use 0 < initial"):
        ThrottlePolicy(**policy)
