"""Memory tuning for a long-running process that is mostly one Python thread: glibc's malloc
arenas and trimming, and Python's garbage collector after start.

Arenas: glibc gives each thread that contends for the heap an arena of its own (up to 8 per
core), and memory freed into an arena is not handed to another. gRPC's event-engine threads
each fill one, so the agent's RSS grew by 3.3 MiB under 64 concurrent Allocate callers (0.9 MiB
with one arena) and did not come back. With the GIL held for nearly all the work, one shared
arena costs no measurable latency (bench/RESULTS.md). The effect is the same as
``MALLOC_ARENA_MAX`` in the environment, which an operator can still set: glibc reads it at
start, and this call only lowers the cap for arenas not yet created.

Trimming: what a burst of gRPC connections frees stays in the heap between chunks still in use,
and glibc gives back only the top of the heap on its own. `TrimWhenIdle` calls
``malloc_trim(0)`` once calls stop for a second, which returns every free page: after 64
concurrent callers the agent's heap went from 11.1 to 9.8 MiB (3 x 1,000 slots + rdma/hca).

Freezing: the agent starts with about 45,000 tracked objects (modules, settings models, device
lists) that live as long as it does, yet every full collection walks them all. Under load the
objects made last at start were promoted until a full collection ran: py-spy saw one of about
200 ms (profiled) among 4,000 Allocates, and none in a minimal plugin. `freeze_startup`
collects once and moves what is left out of the collector's generations (`gc.freeze`), so
later collections walk only newer objects.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import gc
import logging
import os
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

#: mallopt's parameter number for the arena cap (glibc's malloc.h)
M_ARENA_MAX = -8
#: seconds without a call after which a busy spell counts as over
QUIET_SECONDS = 1.0


@functools.cache
def _glibc(name: str) -> Any:
    """A glibc function by name, or None where the C library has none (musl, macOS)."""
    try:  # the symbols already loaded: ctypes.util would import shutil, tempfile, bz2, lzma
        function = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        log.debug("no %s in the C library; malloc left as it is", name)
        return None
    function.restype = ctypes.c_int
    return function


def limit_arenas(count: int) -> bool:
    """Cap the arenas at ``count`` unless ``MALLOC_ARENA_MAX`` is set; False where the C
    library has no glibc ``mallopt`` (musl, macOS) or refused the value."""
    if count < 1:
        raise ValueError(f"arena count must be at least 1, not {count}")
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False  # the operator's choice, already applied by glibc
    mallopt = _glibc("mallopt")
    return mallopt is not None and bool(mallopt(ctypes.c_int(M_ARENA_MAX), ctypes.c_int(count)))


def freeze_startup() -> int:
    """Collect the garbage start left, then exempt every live object from later collections;
    returns how many objects are frozen. Call once, after the long-lived state is built."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def trim() -> bool:
    """Give the heap's free pages back to the kernel; False where there is no glibc
    ``malloc_trim`` or nothing was given back."""
    malloc_trim = _glibc("malloc_trim")
    return malloc_trim is not None and bool(malloc_trim(ctypes.c_size_t(0)))


#: ``call_later(delay, callback, argument)``, as an asyncio loop has it
Timer = Callable[[float, Callable[[int], None], int], object]


class TrimWhenIdle:
    """Trims once calls stop: `busy()` on every call, and ``quiet`` seconds after the last one
    of a spell the heap is trimmed, once. ``timer`` is the running event loop's ``call_later``
    unless given."""

    def __init__(
        self,
        quiet: float = QUIET_SECONDS,
        release: Callable[[], bool] = trim,
        timer: Timer | None = None,
    ) -> None:
        self.quiet = quiet
        self._release = release
        self._timer = timer
        self._calls = 0
        self._pending = False

    def busy(self) -> None:
        """Note one call: costs an increment, and a timer at the first call of a spell."""
        self._calls += 1
        if not self._pending:
            self._schedule()

    def _schedule(self) -> None:
        timer = self._timer or asyncio.get_running_loop().call_later
        timer(self.quiet, self._check, self._calls)
        self._pending = True

    def _check(self, calls_then: int) -> None:
        if self._calls != calls_then:  # still busy: look again a quiet period later
            self._schedule()
            return
        self._pending = False
        self._release()


#: the process's one heap: every servicer notes its calls here
AFTER_CALLS = TrimWhenIdle()
