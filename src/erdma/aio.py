"""asyncio building blocks shared by the programs and the test doubles."""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Self


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
