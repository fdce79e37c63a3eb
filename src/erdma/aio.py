"""asyncio building blocks shared by the programs and the test doubles."""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Self, TypeVar

T = TypeVar("T")


class AsyncService(abc.ABC):
    """Something that runs between ``start()`` and ``stop()``; ``async with`` calls both."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Begin serving; returns once the service is ready."""

    @abc.abstractmethod
    async def stop(self) -> object:
        """Stop serving and release what ``start()`` took; safe to call when not started."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


async def retry_until_done(
    what: str,
    step: Callable[[], Awaitable[T]],
    log: logging.Logger,
    initial_delay: float = 1.0,
    max_delay: float = 60.0,
) -> T:
    """Run `step` until it succeeds, logging each failure and backing off (doubling, capped).

    Background work of a daemon must neither die silently nor crash the process: a transient
    failure (metadata not there yet, netdev not yet created) is logged and tried again.
    """
    delay = initial_delay
    while True:
        try:
            return await step()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(
                f"{what} failed; retrying in {delay:g}s",
                extra={"error": f"{type(exc).__name__}: {exc}"},
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_delay)
