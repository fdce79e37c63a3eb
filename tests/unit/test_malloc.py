"""erdma.malloc: the arena cap the agent sets at start."""

from __future__ import annotations

import platform

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
