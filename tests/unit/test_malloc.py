"""erdma.malloc: the arena cap and the frozen start-up objects the agent sets at start, and the
heap trimmed after a spell of calls."""

from __future__ import annotations

import gc
import platform
from collections.abc import Callable

import pytest

from erdma import malloc


def test_a_count_below_one_is_refused_with_the_value():
    with pytest.raises(ValueError, match="arena count must be at least 1, not 0"):
        malloc.limit_arenas(0)


def test_the_operators_malloc_arena_max_wins(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert malloc.limit_arenas(1) is False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_takes_the_cap(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert malloc.limit_arenas(8) is True


class Timers:
    """`call_later` that only records: the test decides when a timer fires."""

    def __init__(self) -> None:
        self.due: list[tuple[float, Callable[[int], None], int]] = []

    def __call__(self, delay: float, callback: Callable[[int], None], arg: int) -> None:
        self.due.append((delay, callback, arg))

    def fire(self) -> None:
        _, callback, arg = self.due.pop(0)
        callback(arg)


def test_the_heap_is_trimmed_once_a_quiet_period_after_the_last_call():
    trims: list[None] = []

    def release() -> bool:
        trims.append(None)
        return True

    timers = Timers()
    idle = malloc.TrimWhenIdle(1.0, release, timers)

    for _ in range(3):  # a spell of calls starts one timer
        idle.busy()
    assert [d for d, _, _ in timers.due] == [1.0]
    idle.busy()  # a call before the timer fires: still busy, look again later
    timers.fire()
    assert trims == [] and len(timers.due) == 1
    timers.fire()  # a quiet second since the last call
    assert trims == [None] and timers.due == []

    idle.busy()  # the next spell gets a timer of its own
    timers.fire()
    assert trims == [None, None]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_glibc_gives_back_freed_pages_between_live_chunks():
    chunks = [bytearray(64 * 1024) for _ in range(200)]  # below the mmap threshold: the heap
    del chunks[::2]  # free pages between chunks still in use: glibc keeps them on its own
    assert malloc.trim() is True


def test_objects_alive_at_start_are_frozen_out_of_later_collections():
    """A container alive at the call leaves the generations a collection walks. (Counts are
    not compared: other threads of the test process free frozen objects at any time.)"""
    alive_at_start = [object()]
    assert any(o is alive_at_start for o in gc.get_objects())
    try:
        assert malloc.freeze_startup() > 0
        assert not any(o is alive_at_start for o in gc.get_objects())
    finally:
        gc.unfreeze()  # other tests in this process collect as usual
