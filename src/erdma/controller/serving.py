"""An event loop in a thread of its own for the controller's HTTP endpoints (health, webhooks).

kopf, when its operator stops (at every leadership loss), cancels every task of its event loop
created after the operator started, because it cannot tell its own tasks from others. In that
loop the cancelled tasks would include the connection handlers of the webhook and health
servers: a keep-alive connection from the API server would hang until its timeout and the
review fall to the webhook's failurePolicy. In this loop they are out of the operator's reach.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class ServingLoop:
    """Runs coroutines on a private loop in a daemon thread; ``close`` stops the thread."""

    def __init__(self, name: str = "erdma-serving") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the serving loop and return its result here."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def close(self) -> None:
        """Stop the loop once its running coroutines are done; the caller has stopped them."""
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.to_thread(self._thread.join)
        self._loop.close()
