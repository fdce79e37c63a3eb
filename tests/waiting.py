"""Waiting on a condition, for tests: poll until it holds, with a generous deadline.

Tests wait on conditions, never on sleeps, and never assert how long something took (see
tests/duration_asserts.py): the deadline only keeps a broken test from hanging, so give it room
for a loaded 2-core machine (tens of seconds, not the time it takes on an idle one).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def until(
    check: Callable[[], bool | Awaitable[bool]], timeout: float = 60.0, what: str = ""
) -> None:
    """Poll ``check`` (sync or async) every 50 ms until it is true; AssertionError at timeout."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if not isinstance(got, bool):
            got = await got
        if got:
            return
        assert time.monotonic() < deadline, f"not reached within {timeout:g} s: {what}"
        await asyncio.sleep(0.05)
