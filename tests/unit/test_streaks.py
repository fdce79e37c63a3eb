"""Per-Node recheck streaks: each Node has its own ladder, jittered, capped, reset on `end`."""

from __future__ import annotations

from erdma.controller.streaks import Streaks


def test_each_node_climbs_its_own_ladder_by_the_factor_up_to_the_cap() -> None:
    streaks = Streaks(0.5, 2.0, factor=1.5)
    delays = [streaks.next("a") for _ in range(6)]
    ceilings = [0.5, 0.75, 1.125, 1.6875, 2.0, 2.0]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True)), delays
    assert 0.25 <= streaks.next("b") <= 0.5  # another Node starts at the bottom
    assert "a" in streaks and "b" in streaks and "c" not in streaks


def test_end_starts_the_next_streak_from_the_first_delay() -> None:
    streaks = Streaks(1.0, 30.0)
    for _ in range(5):
        streaks.next("a")
    streaks.end("a")
    assert "a" not in streaks
    assert 0.5 <= streaks.next("a") <= 1.0
    streaks.end("never-seen")  # ending a streak that never began is no error


def test_a_cap_below_the_first_delay_is_the_first_delay() -> None:
    streaks = Streaks(1.0, 0.3)
    assert 0.15 <= streaks.next("a") <= 0.3
