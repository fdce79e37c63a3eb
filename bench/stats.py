"""Summary statistics shared by the benchmarks, so every table computes a percentile alike."""

from __future__ import annotations


def pct(samples: list[float], q: float) -> float:
    """The `q` quantile of `samples` by nearest rank (p99 of 100 samples is the largest)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
