"""Cap glibc's malloc arenas for a long-running process that is mostly one Python thread.

glibc gives each thread that contends for the heap an arena of its own (up to 8 per core),
and memory freed into an arena is not handed to another. gRPC's event-engine threads each
fill one, so the agent's RSS grew by 3.3 MiB under 64 concurrent Allocate callers (0.9 MiB with
one arena) and did not come back. With the GIL held for nearly all the work,
one shared arena costs no measurable latency (bench/RESULTS.md). The effect is the same as
``MALLOC_ARENA_MAX`` in the environment, which an operator can still set: glibc reads it at
start, and this call only lowers the cap for arenas not yet created.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)

#: mallopt's parameter number for the arena cap (glibc's malloc.h)
M_ARENA_MAX = -8


def limit_arenas(count: int) -> bool:
    """Cap the arenas at ``count`` unless ``MALLOC_ARENA_MAX`` is set; False where the C
    library has no glibc ``mallopt`` (musl, macOS) or refused the value."""
    if count < 1:
        raise ValueError(f"arena count must be at least 1, not {count}")
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False  # the operator's choice, already applied by glibc
    try:  # the symbols already loaded: ctypes.util would import shutil, tempfile, bz2, lzma
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        log.debug("no mallopt in the C library; malloc arenas left as they are")
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, count))
