"""A batch that keeps gaining company stays open (``Coalescer``'s ``hold``).

On looptime's fake loop clock: when a request left is a fact of the schedule, not of the
machine's load.
"""

from __future__ import annotations

import asyncio

import pytest

from erdma.controller.batching import Coalescer


class Backend:
    """Answers every key with its upper-case form; remembers the batches and when they left."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.sent_at: list[float] = []

    async def fetch(self, keys: list[str]) -> dict[str, str]:
        self.sent_at.append(asyncio.get_running_loop().time())
        self.batches.append(keys)
        return {k: k.upper() for k in keys}


async def _stream(lookups: Coalescer[str, str], keys: list[str], gap: float) -> list[str | None]:
    """Look the keys up one every ``gap`` seconds, as passes of a fleet arrive."""

    async def later(key: str, delay: float) -> str | None:
        await asyncio.sleep(delay)
        return await lookups.get(key)

    return await asyncio.gather(*(later(k, i * gap) for i, k in enumerate(keys)))


@pytest.mark.looptime
async def test_a_steady_stream_of_lookups_shares_one_request_up_to_the_hold():
    """Look-ups 0.05 s apart, each within the 0.1 s window of the last: one request for those
    of the first 0.42 s, not one per window."""
    backend = Backend()
    lookups = Coalescer(backend.fetch, window=0.1, max_batch=100, hold=0.42)
    began = asyncio.get_running_loop().time()
    keys = [f"k{i}" for i in range(12)]  # asked at 0, 0.05, ..., 0.55 s
    assert await _stream(lookups, keys, 0.05) == [k.upper() for k in keys]
    assert backend.batches == [keys[:9], keys[9:]]  # 0-0.40 s, then 0.45-0.55 s
    assert [round(at - began, 6) for at in backend.sent_at] == [0.42, 0.65]


@pytest.mark.looptime
async def test_a_lone_lookup_and_the_end_of_a_burst_wait_only_the_window():
    backend = Backend()
    lookups = Coalescer(backend.fetch, window=0.1, max_batch=100, hold=1.0)
    began = asyncio.get_running_loop().time()
    assert await lookups.get("a") == "A"
    assert await _stream(lookups, ["b", "c", "d"], 0.02) == ["B", "C", "D"]
    assert backend.batches == [["a"], ["b", "c", "d"]]
    # "a" after its window; the burst 0.1 s after its last look-up (0.04 s into it)
    assert [round(at - began, 6) for at in backend.sent_at] == [0.1, 0.24]


@pytest.mark.looptime
async def test_company_never_holds_a_full_batch():
    backend = Backend()
    lookups = Coalescer(backend.fetch, window=0.1, max_batch=3, hold=10.0)
    keys = ["a", "b", "c", "d"]
    assert await _stream(lookups, keys, 0.05) == ["A", "B", "C", "D"]
    assert backend.batches == [["a", "b", "c"], ["d"]]


def test_a_hold_shorter_than_the_window_is_named():
    with pytest.raises(ValueError, match=r"batch hold 0.05 s is shorter than its window 0.1 s"):
        Coalescer(Backend().fetch, window=0.1, max_batch=1, hold=0.05)
