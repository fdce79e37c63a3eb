"""Steps run side by side: results in order, and a failure stops the steps still running."""

from __future__ import annotations

import asyncio

import pytest

from erdma.aio import all_or_cancel, both


async def test_results_come_in_the_order_of_the_steps_not_of_their_ending():
    async def after(seconds: float, value: object) -> object:
        await asyncio.sleep(seconds)
        return value

    assert await all_or_cancel(after(0.05, "slow"), after(0.0, "fast")) == ["slow", "fast"]
    assert await both(after(0.02, "text"), after(0.0, 7)) == ("text", 7)


async def test_a_failure_cancels_the_steps_still_running_before_it_is_raised():
    """A reconcile pass that gave up must not leave a create or a read going on for its Node."""
    stopped = asyncio.Event()

    async def long_call() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            stopped.set()
            raise

    async def failing() -> None:
        await asyncio.sleep(0.01)
        raise ValueError("listing the ENIs failed")

    with pytest.raises(ValueError, match="listing the ENIs failed"):
        await both(long_call(), failing())
    assert stopped.is_set()
