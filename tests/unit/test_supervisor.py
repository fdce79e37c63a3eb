"""The one backoff and the one supervisor every long-lived task runs under."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

from erdma.aio import Backoff, OnFailure, SupervisedTask, Supervisor, TaskFailed


def quick() -> Backoff:
    return Backoff(initial=0.01, maximum=0.02)


def test_backoff_doubles_up_to_its_cap_with_jitter_and_resets():
    backoff = Backoff(initial=1.0, maximum=5.0, rng=random.Random(3))
    delays = [backoff.next_delay() for _ in range(6)]
    for delay, ceiling in zip(delays, [1, 2, 4, 5, 5, 5], strict=True):
        assert ceiling / 2 <= delay <= ceiling
    assert len(set(delays)) == 6  # jittered: no two retries in lockstep
    backoff.reset()
    assert backoff.next_delay() <= 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial": -1}, r"initial=-1 is invalid: must be >= 0 seconds"),
        ({"initial": 2, "maximum": 1}, r"maximum=1 is invalid: must be >= initial \(2"),
        ({"factor": 0.5}, r"factor=0.5 is invalid: must be >= 1"),
    ],
)
def test_bad_backoff_is_refused_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Backoff(**kwargs)


def test_task_names_must_be_unique():
    async def work() -> None: ...

    with pytest.raises(ValueError, match=r"unique.*\['a', 'a'\]"):
        Supervisor([SupervisedTask("a", work), SupervisedTask("a", work)])


async def test_a_dying_task_is_logged_with_its_traceback_and_restarted(caplog):
    runs = 0
    stop = asyncio.Event()

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs < 3:
            raise RuntimeError(f"boom {runs}")
        stop.set()
        await asyncio.Event().wait()

    supervisor = Supervisor([SupervisedTask("flaky", flaky, backoff=quick)])
    with caplog.at_level(logging.ERROR, logger="erdma.aio"):
        await asyncio.wait_for(supervisor.run(stop), 5)
    assert runs == 3 and supervisor.restarts == {"flaky": 2}
    failures = [r for r in caplog.records if "background task 'flaky' failed" in r.getMessage()]
    assert len(failures) == 2
    assert all(r.exc_info and r.exc_info[0] is RuntimeError for r in failures)
    assert "boom 1" in failures[0].getMessage() and "restart 1 in" in failures[0].getMessage()


async def test_a_forever_task_that_returns_is_restarted_but_a_one_shot_is_done(caplog):
    forever_runs, once_runs = 0, 0
    stop = asyncio.Event()

    async def loop_that_ends() -> None:
        nonlocal forever_runs
        forever_runs += 1
        if forever_runs == 2:
            stop.set()

    async def once() -> None:
        nonlocal once_runs
        once_runs += 1

    supervisor = Supervisor(
        [
            SupervisedTask("loop", loop_that_ends, backoff=quick),
            SupervisedTask("once", once, forever=False),
        ]
    )
    with caplog.at_level(logging.ERROR, logger="erdma.aio"):
        await asyncio.wait_for(supervisor.run(stop), 5)
    assert (forever_runs, once_runs) == (2, 1)
    assert "'loop' returned, but must run forever; restart 1" in caplog.text
    assert supervisor.restarts == {"loop": 1, "once": 0}


async def test_an_exit_task_failure_stops_every_task_and_raises(caplog):
    sibling_cancelled = asyncio.Event()

    async def sibling() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            sibling_cancelled.set()
            raise

    async def critical() -> None:
        await asyncio.sleep(0.01)
        raise ConnectionError("lease lost")

    supervisor = Supervisor(
        [SupervisedTask("sibling", sibling), SupervisedTask("leader", critical, OnFailure.EXIT)]
    )
    failed = r"'leader' failed \(ConnectionError: lease lost\)"
    with (
        caplog.at_level(logging.CRITICAL, logger="erdma.aio"),
        pytest.raises(TaskFailed, match=failed),
    ):
        await asyncio.wait_for(supervisor.run(), 5)
    assert sibling_cancelled.is_set()
    assert "stopping the process" in caplog.text


async def test_start_and_stop_run_the_group_in_the_background():
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    async with Supervisor([SupervisedTask("ticker", ticker)]):
        await asyncio.sleep(0.1)
    seen = ticks
    await asyncio.sleep(0.05)
    assert seen > 2 and ticks == seen  # it ran, and stopped with the block
