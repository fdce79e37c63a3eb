"""Per-Node streaks of passes that ended the same way, and the recheck delay each earns.

The reconciler keeps two: Nodes whose ERIs are attaching, and Nodes whose pass the API
server's absence cut short. Both back off per Node, on the shared jittered `Backoff`.
"""

from __future__ import annotations

from erdma.aio import Backoff


class Streaks:
    """Per Node, how many passes in a row ended the same way, and the delay that earns: the
    shared jittered `Backoff` from ``first`` (or ``cap``, if lower) growing by ``factor`` up to
    ``cap``, so Nodes that failed together are not looked at again in lockstep."""

    def __init__(self, first: float, cap: float, factor: float = 2.0) -> None:
        self._backoff = Backoff(initial=min(first, cap), maximum=cap, factor=factor)
        self._count: dict[str, int] = {}

    def next(self, name: str) -> float:
        """Count one more such pass; the delay before the Node's next pass."""
        count = self._count.get(name, 0)
        self._count[name] = count + 1
        return self._backoff.delay(count)

    def end(self, name: str) -> None:
        """The streak is over: the next one starts from ``first`` again."""
        self._count.pop(name, None)

    def __contains__(self, name: str) -> bool:
        return name in self._count
