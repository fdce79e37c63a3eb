"""Watch errors never end the controller: every failed watch re-lists with a growing backoff.

kopf (1.45) ends its whole operator when a watch request is answered with an HTTP error (410
Gone from a proxy or aggregator, 403 while RBAC is being changed, 404 while a CRD is removed
and added again, 5xx once kopf's own retries are spent) or when the stream carries an ERROR
other than 410: the watcher task raises, the operator fails, and the process exits, taking the
webhooks it serves down with it. An in-stream ``ERROR 410 Expired`` makes kopf re-list after a
fixed 0.1 s, about nine lists a second per watch while the server keeps expiring it.

kopf has no setting for either, so this module wraps the one function of its watcher that runs
one list-and-watch cycle (``kopf._cogs.clients.watching.continuous_watch``; kopf is pinned, and
``tests/unit/test_watch_guard.py`` fails if the function moves). A cycle that ends, by an error
or by expiry, before it delivered a watch event or stayed open `SETTLED_AFTER` seconds after
its listing (a quiet cluster sends no event) counts as failed: the next cycle waits on the
shared jittered `Backoff` (0.25-0.5 s, doubling up to 30 s), the second failure in a row logs
one warning for the whole outage and makes ``/readyz`` fail, and a watch that works again
logs one line. Only operators that registered
a `WatchHealth` for their settings are guarded; any other kopf operator in the process is not
touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kopf._cogs.clients import errors as kopf_errors
from kopf._cogs.clients import watching

from erdma.aio import Backoff

log = logging.getLogger(__name__)

#: failed cycles in a row that make an outage: one failure that the next cycle heals is routine
OUTAGE_AFTER = 2
#: seconds a watch must stay open after its listing to count as working on a quiet cluster (no
#: event to show it); longer than kopf's own retries of a failing request (handlers.py)
SETTLED_AFTER = 5.0


@dataclass
class _Streak:
    """Failed list-and-watch cycles in a row of one watched resource."""

    failures: int = 0
    since: float = 0.0
    last_error: str = ""


@dataclass
class WatchHealth:
    """The list-and-watch cycles of one operator's watches, and the pause before the next."""

    backoff: Backoff = field(default_factory=lambda: Backoff(initial=0.5, maximum=30.0))
    _streaks: dict[str, _Streak] = field(default_factory=dict)

    def failed(self, what: str, error: str) -> float:
        """Count a failed cycle of ``what``; the seconds to wait before re-listing it."""
        streak = self._streaks.setdefault(what, _Streak(since=time.monotonic()))
        streak.failures += 1
        streak.last_error = error
        if streak.failures == OUTAGE_AFTER:
            log.warning(
                "the watch of %s keeps failing (%s); re-listing with backoff until it works",
                what,
                error,
            )
        else:
            log.debug("the watch of %s failed (%s); re-listing", what, error)
        return self.backoff.delay(streak.failures - 1)

    def delivered(self, what: str) -> None:
        """The watch of ``what`` delivered an event: any streak of failures is over."""
        streak = self._streaks.pop(what, None)
        if streak is not None and streak.failures >= OUTAGE_AFTER:
            log.info(
                "the watch of %s works again after %d failed attempts in %.0fs",
                what,
                streak.failures,
                time.monotonic() - streak.since,
            )

    def stopped(self) -> None:
        """The operator stopped: its watches are gone, and so are their failures."""
        self._streaks.clear()

    def problem(self) -> str:
        """Why the watches make this replica not ready, or ``""``; safe from another thread."""
        now = time.monotonic()
        outages = [
            f"the watch of {what} has failed {s.failures} times in {now - s.since:.0f}s "
            f"({s.last_error})"
            for what, s in list(self._streaks.items())
            if s.failures >= OUTAGE_AFTER
        ]
        return "; ".join(outages)


_guarded: dict[int, WatchHealth] = {}
_original: Callable[..., AsyncIterator[Any]] | None = None


@contextlib.contextmanager
def guarding(settings: object, health: WatchHealth) -> Iterator[None]:
    """Guard the watches of the operator that runs with ``settings`` while inside."""
    _install()
    _guarded[id(settings)] = health
    try:
        yield
    finally:
        del _guarded[id(settings)]
        health.stopped()


def _install() -> None:
    global _original
    if _original is None:
        _original = watching.continuous_watch
        watching.continuous_watch = _guarded_watch


def _describe(exc: BaseException) -> str:
    if isinstance(exc, kopf_errors.APIError):
        return f"HTTP {exc.status}: {exc}"
    return str(exc)


async def _guarded_watch(*, settings: Any, resource: Any, **kwargs: Any) -> AsyncIterator[Any]:
    assert _original is not None
    health = _guarded.get(id(settings))
    cycle = _original(settings=settings, resource=resource, **kwargs)
    if health is None:
        async for event in cycle:
            yield event
        return
    what = str(resource.plural)
    works = False
    settling: asyncio.TimerHandle | None = None

    def working() -> None:
        nonlocal works
        if not works:
            works = True
            health.delivered(what)

    try:
        try:
            async for event in cycle:
                if event is watching.Bookmark.LISTED and settling is None:
                    settling = asyncio.get_running_loop().call_later(SETTLED_AFTER, working)
                elif isinstance(event, dict) and event.get("type") is not None:
                    working()
                yield event
        finally:
            if settling is not None:
                settling.cancel()
    except (kopf_errors.APIError, watching.WatchingError) as exc:
        await asyncio.sleep(health.failed(what, _describe(exc)))
        return
    if not works:
        await asyncio.sleep(health.failed(what, "the watch expired before any event (410)"))
