"""A batch fetch cut short as the event loop shuts down (its task closed by the garbage collector;
the cloud SDK turns that into "coroutine ignored GeneratorExit") fails a future nobody will
await any more. That must not log "Future exception was never retrieved" with a traceback: it
did, once, as a controller test stopped."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Mapping
from typing import Any

from erdma.controller.batching import Coalescer


async def test_a_batch_failed_at_shutdown_logs_nothing() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    async def fetch(keys: list[str]) -> Mapping[str, int]:
        try:
            await asyncio.Event().wait()
        except GeneratorExit:  # what the SDK does when its coroutine is closed
            raise RuntimeError("coroutine ignored GeneratorExit") from None
        return {}

    batches: Coalescer[str, int] = Coalescer(fetch, window=0.0, max_batch=1)
    answer: asyncio.Future[Mapping[str, int]] = loop.create_future()
    run = batches._run(["eni-1"], answer, 0.0)
    run.send(None)  # the fetch is in flight
    run.close()  # the garbage collector closing the pending task's coroutine
    assert answer.done()  # failed, with no caller left to await it
    del answer, run
    gc.collect()  # where an unretrieved exception of a future is reported
    assert [c["message"] for c in reported] == []
