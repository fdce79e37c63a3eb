"""asyncio building blocks shared by the programs: services, backoff and task supervision.

Every retry in the project is paced by one `Backoff`, and every long-lived task of the agent
and the controller runs under a `Supervisor`, so a failure is always logged with its traceback
and then either retried at a growing, jittered pace or turned into a deliberate exit.
"""

from __future__ import annotations

import abc
import asyncio
import enum
import logging
import random
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self, TypeVar, cast

T = TypeVar("T")
U = TypeVar("U")
log = logging.getLogger(__name__)


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


@dataclass
class Backoff:
    """Capped exponential backoff with jitter: delay n is uniform in [c/2, c], c = min(maximum,
    initial * factor**n).

    The jitter keeps many agents (or plugins, or reconciles) from retrying a recovering kubelet,
    API server or cloud API in lockstep; the lower bound of c/2 keeps the pace growing.
    """

    initial: float = 0.1
    maximum: float = 30.0
    factor: float = 2.0
    rng: random.Random = field(default_factory=random.Random)
    _attempt: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.initial < 0:
            raise ValueError(f"backoff initial={self.initial!r} is invalid: must be >= 0 seconds")
        if self.maximum < self.initial:
            raise ValueError(
                f"backoff maximum={self.maximum!r} is invalid: must be >= initial "
                f"({self.initial!r} seconds)"
            )
        if self.factor < 1:
            raise ValueError(f"backoff factor={self.factor!r} is invalid: must be >= 1")

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        ceiling = min(self.maximum, self.initial * self.factor ** min(attempt, 64))
        return self.rng.uniform(ceiling / 2, ceiling)

    def next_delay(self) -> float:
        """The delay for the next retry; each call moves one step up the ladder."""
        delay = self.delay(self._attempt)
        self._attempt += 1
        return delay

    def reset(self) -> None:
        """Back to the first step, after a success."""
        self._attempt = 0


async def retry_until_done(
    what: str,
    step: Callable[[], Awaitable[T]],
    log: logging.Logger,
    backoff: Backoff | None = None,
) -> T:
    """Run `step` until it succeeds, logging a failure and waiting a `Backoff` step.

    For one-shot setup whose inputs appear late (metadata of a just-attached ERI, a netdev not
    yet created): a transient failure is logged and tried again, never fatal. A failure like
    the one before it is not logged again, so a port that stays busy logs one line, not one
    a minute.
    """
    backoff = backoff or Backoff(initial=1.0, maximum=60.0)
    last = ""
    while True:
        try:
            return await step()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            delay = backoff.next_delay()
            error = f"{type(exc).__name__}: {exc}"
            if error != last:
                log.warning(f"{what} failed; retrying in {delay:.2g}s", extra={"error": error})
            last = error
        await asyncio.sleep(delay)


async def all_or_cancel(*steps: Awaitable[T]) -> list[T]:
    """Run ``steps`` side by side; their results in order, or the first failure.

    Unlike ``asyncio.gather``, a failure cancels the steps still running, and waits for them,
    before it is raised: nothing goes on working for a caller that has given up (a reconcile
    pass whose Node another worker may take up as soon as this one returns).
    """
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def both(first: Awaitable[T], second: Awaitable[U]) -> tuple[T, U]:
    """``all_or_cancel`` of two steps of different kinds, their results typed."""
    a, b = await all_or_cancel(first, second)
    return cast(T, a), cast(U, b)


class OnFailure(enum.Enum):
    """What a `Supervisor` does when a task raises."""

    RESTART = "restart"  # log the traceback, wait a Backoff step, run the task again
    EXIT = "exit"  # log the traceback and stop every task: the process exits on purpose


@dataclass(frozen=True)
class SupervisedTask:
    """One long-lived piece of work. ``run`` is called anew at each restart.

    A ``forever`` task returning is itself a failure (a loop that must never end ended); a
    one-shot task (``forever=False``) that returns is done and not run again.
    """

    name: str
    run: Callable[[], Awaitable[object]]
    on_failure: OnFailure = OnFailure.RESTART
    forever: bool = True
    backoff: Callable[[], Backoff] = lambda: Backoff(initial=0.5, maximum=30.0)
    # a run that lasted this long was healthy: the next failure starts the backoff afresh
    healthy_after: float = 60.0


class TaskFailed(Exception):
    """An ``OnFailure.EXIT`` task failed; the message names it, the cause is chained."""


class Supervisor(AsyncService):
    """Runs tasks in one `asyncio.TaskGroup` until stopped or until an EXIT task fails.

    `run(stop)` is the form for a program's main; `start()`/`stop()` run the same group in the
    background for a component that others ``async with``. Restarts are counted per task in
    ``restarts`` so tests and metrics can see them.
    """

    def __init__(self, tasks: Sequence[SupervisedTask], logger: logging.Logger = log) -> None:
        names = [t.name for t in tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"supervised task names must be unique, got {names}")
        self.tasks = list(tasks)
        self.restarts: dict[str, int] = dict.fromkeys(names, 0)
        self._log = logger
        self._stop = asyncio.Event()
        self._background: asyncio.Task[None] | None = None

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run every task until ``stop`` is set; raises `TaskFailed` when an EXIT task fails."""
        stop = stop or self._stop
        try:
            async with asyncio.TaskGroup() as group:
                for task in self.tasks:
                    group.create_task(self._keep(task, stop), name=task.name)
                group.create_task(_raise_when_set(stop))
        except* _Stopped:
            pass
        except* TaskFailed as failed:
            raise failed.exceptions[0] from failed

    async def _keep(self, task: SupervisedTask, stop: asyncio.Event) -> None:
        backoff = task.backoff()
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            error: BaseException | None = None
            try:
                await task.run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failure, error = f"failed ({type(exc).__name__}: {exc})", exc
            else:
                if not task.forever or stop.is_set():  # done, or ended because we stop
                    return
                failure = "returned, but must run forever"
            if task.on_failure is OnFailure.EXIT:
                self._log.critical(
                    "background task %r %s; stopping the process",
                    task.name,
                    failure,
                    exc_info=error,
                )
                raise TaskFailed(f"background task {task.name!r} {failure}") from error
            if loop.time() - started >= task.healthy_after:
                backoff.reset()
            delay = backoff.next_delay()
            self.restarts[task.name] += 1
            self._log.error(
                "background task %r %s; restart %d in %.2gs",
                task.name,
                failure,
                self.restarts[task.name],
                delay,
                exc_info=error,
            )
            await asyncio.sleep(delay)

    async def start(self) -> None:
        self._stop.clear()
        self._background = asyncio.get_running_loop().create_task(self.run(self._stop))

    async def stop(self) -> None:
        if self._background is None:
            return
        self._stop.set()
        background, self._background = self._background, None
        await background


class _Stopped(Exception):
    """Raised inside the group to end it when the stop event is set."""


async def _raise_when_set(stop: asyncio.Event) -> None:
    await stop.wait()
    raise _Stopped


class Heartbeat:
    """A timestamp an event loop refreshes every ``interval``, read from another thread.

    The health endpoints answer from a thread of their own, so they can tell a wedged loop (a
    blocking call, a busy-looping task) from a live one: only a running loop keeps beating.
    """

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._last = time.monotonic()

    def age(self) -> float:
        """Seconds since the loop last beat."""
        return time.monotonic() - self._last

    async def beat_forever(self) -> None:
        while True:
            self._last = time.monotonic()
            await asyncio.sleep(self.interval)


#: each asks a daemon to stop through its shutdown path: SIGTERM (the kubelet, a rollout),
#: SIGINT (Ctrl-C) and SIGHUP (a closed terminal), which would otherwise kill it at once and
#: leave its sockets and Lease behind
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def stop_on_signals(stop: asyncio.Event) -> None:
    """Set ``stop`` on any of `STOP_SIGNALS` (again after a library replaced the handlers)."""
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
