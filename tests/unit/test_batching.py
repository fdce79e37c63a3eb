"""Look-ups coalesced into one request, and how a batch shares the account's rate limit.

The rate-limit tests run on looptime's fake loop clock (``pytest.mark.looptime``): sleeps and
timers advance it exactly, so when a request left is a fact of the schedule, not of the
machine's load. The buckets use the loop's clock for the same reason.
"""

from __future__ import annotations

import asyncio

import pytest

from erdma.controller.batching import Coalescer
from erdma.controller.ratelimit import TokenBucket


class Backend:
    """Answers every key with its upper-case form, each request through ``bucket`` as
    ``EcsCloud._call`` does, and remembers the batches and when they went out."""

    def __init__(self, bucket: TokenBucket | None = None) -> None:
        self.bucket = bucket
        self.batches: list[list[str]] = []
        self.sent_at: list[float] = []

    async def fetch(self, keys: list[str]) -> dict[str, str]:
        if self.bucket is not None:
            await self.bucket.acquire()
        self.sent_at.append(asyncio.get_running_loop().time())
        self.batches.append(keys)
        return {k: k.upper() for k in keys if k != "missing"}


async def test_concurrent_lookups_share_one_request_and_each_gets_its_own_item():
    backend = Backend()
    lookups = Coalescer(backend.fetch, window=0.05, max_batch=100)
    got = await asyncio.gather(*(lookups.get(k) for k in ["a", "b", "a", "missing"]))
    assert got == ["A", "B", "A", None]
    assert backend.batches == [["a", "b", "missing"]]


@pytest.mark.looptime
async def test_a_full_batch_goes_out_at_once():
    backend = Backend()
    lookups = Coalescer(backend.fetch, window=10.0, max_batch=2)
    got = await asyncio.wait_for(asyncio.gather(lookups.get("a"), lookups.get("b")), 1.0)
    assert got == ["A", "B"] and backend.batches == [["a", "b"]]


def _bucket(rate: float, burst: float) -> TokenBucket:
    return TokenBucket(rate, burst=burst, clock=asyncio.get_running_loop().time)


@pytest.mark.looptime
async def test_a_backlogged_bucket_keeps_the_batch_open_until_its_slot_comes():
    """At 10 calls/s with 3 calls queued ahead, the next request can leave only 0.3 s from
    now: every look-up asked for before then joins it, and it spends the slot it booked
    rather than queueing again behind the calls booked since."""
    bucket = _bucket(10, burst=1)
    backend = Backend(bucket)
    lookups = Coalescer(backend.fetch, window=0.01, max_batch=100, bucket=bucket)
    for _ in range(4):  # the burst token, then 3 calls queued ahead (0.1 s apart)
        bucket.reserve()
    loop = asyncio.get_running_loop()
    began = loop.time()

    async def later(key: str, delay: float) -> str | None:
        await asyncio.sleep(delay)
        return await lookups.get(key)

    first = asyncio.ensure_future(lookups.get("a"))
    await asyncio.sleep(0)  # the batch is open and has booked its slot
    bucket.reserve()  # someone else's call, booked after the batch's
    got = await asyncio.gather(first, later("b", 0.1), later("c", 0.2))

    assert got == ["A", "B", "C"]
    assert backend.batches == [["a", "b", "c"]]
    # its own slot (0.4 s), then a second batch books the next free slot: after the other
    # caller's (0.6 s)
    assert await lookups.get("d") == "D"
    assert [round(at - began, 6) for at in backend.sent_at] == [0.4, 0.6]


@pytest.mark.looptime
async def test_an_idle_bucket_keeps_the_plain_window():
    bucket = _bucket(10, burst=5)
    backend = Backend(bucket)
    lookups = Coalescer(backend.fetch, window=0.05, max_batch=100, bucket=bucket)
    began = asyncio.get_running_loop().time()
    assert await lookups.get("a") == "A"
    assert [round(at - began, 6) for at in backend.sent_at] == [0.05]


@pytest.mark.looptime
async def test_a_failed_fetch_fails_every_caller_and_the_next_batch_still_pays():
    bucket = _bucket(10, burst=1)
    calls = []

    async def failing(keys: list[str]) -> dict[str, str]:
        await bucket.acquire()
        calls.append(keys)
        raise RuntimeError("ServiceUnavailable")

    lookups = Coalescer(failing, window=0.01, max_batch=100, bucket=bucket)
    got = await asyncio.gather(lookups.get("a"), lookups.get("b"), return_exceptions=True)
    assert [str(e) for e in got] == ["ServiceUnavailable", "ServiceUnavailable"]
    # outside a batch, acquire takes a token of its own: the booked one was used exactly once,
    # so the next token is one interval (0.1 s) after it, less the 0.01 s window since
    assert round(bucket.reserve(), 6) == 0.09


def test_bad_batch_settings_are_named():
    with pytest.raises(ValueError, match=r"batch window -1 s / size 0 is invalid"):
        Coalescer(Backend().fetch, window=-1, max_batch=0)
