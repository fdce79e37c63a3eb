"""Scenario registry, trial bookkeeping and the result table of the fault suite.

A scenario breaks one thing (a kubelet wipe, a SIGKILL, an API-server outage, a bad sysfs file)
a number of times and reports, per trial, whether the system held and how long it took to
recover. The same scenario runs with full trial counts in `make chaos` and with a few trials in
`make test`, so a regression fails CI and the published figures come from the same code.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tests.fakes.kubeapi import KubeApiUnavailable

ScenarioBody = Callable[["Trials"], Awaitable[None] | None]


@dataclass
class Trials:
    """What one scenario run records: a held/failed verdict and a recovery time per trial.

    ``count`` is how many trials to run (full or short); ``short`` lets a scenario also shorten
    its own durations (an outage of 2 s instead of 30 s) where the full length only adds time.
    """

    count: int
    short: bool
    held: int = 0
    recoveries: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    #: what this machine lacks to run the scenario at all (no etcd for the API server), if any
    unavailable: str = ""

    @property
    def run(self) -> int:
        return self.held + len(self.failures)

    def ok(self, recovery_s: float | None = None) -> None:
        """One trial held; ``recovery_s`` is how long the system took to be whole again."""
        self.held += 1
        if recovery_s is not None:
            self.recoveries.append(recovery_s)

    def failed(self, why: str) -> None:
        self.failures.append(why)

    def check(self, condition: bool, why: str, recovery_s: float | None = None) -> None:
        """Record one trial: held when ``condition`` is true, else failed for ``why``."""
        if condition:
            self.ok(recovery_s)
        else:
            self.failed(why)

    @property
    def worst_recovery(self) -> float | None:
        return max(self.recoveries) if self.recoveries else None


@contextmanager
def stopwatch() -> Iterator[Callable[[], float]]:
    """``with stopwatch() as elapsed:`` ... ``elapsed()`` seconds since the block started."""
    started = time.monotonic()
    yield lambda: time.monotonic() - started


@dataclass(frozen=True)
class Scenario:
    name: str
    area: str
    full: int
    short: int
    what_holds: str
    body: ScenarioBody

    def run(self, short: bool) -> Trials:
        trials = Trials(count=self.short if short else self.full, short=short)
        try:
            outcome = self.body(trials)
            if inspect.isawaitable(outcome):
                asyncio.run(_awaited(outcome))
        except KubeApiUnavailable as exc:  # not a verdict: the machine lacks what it needs
            trials.unavailable = f"real Kubernetes API server unavailable: {exc}"
            trials.failed(trials.unavailable)
            return trials
        except Exception as exc:  # a crashed scenario is a failed one, reported
            trials.failed(f"scenario crashed: {type(exc).__name__}: {exc}")
        if trials.run < trials.count and not trials.failures:
            trials.failed(f"only {trials.run} of {trials.count} trials were recorded")
        return trials


async def _awaited(outcome: Awaitable[None]) -> None:
    await outcome


REGISTRY: list[Scenario] = []


def scenario(
    name: str, *, area: str, full: int, short: int, holds: str
) -> Callable[[ScenarioBody], ScenarioBody]:
    """Register a scenario: ``holds`` says, for the table, what 'held' means in it."""

    def register(body: ScenarioBody) -> ScenarioBody:
        if any(existing.name == name for existing in REGISTRY):
            raise ValueError(f"two fault scenarios are named {name!r}")
        REGISTRY.append(Scenario(name, area, full, short, holds, body))
        return body

    return register


def load_all() -> list[Scenario]:
    """Import every scenario module (they register on import) and return the registry."""
    from bench.chaos import catalog  # noqa: F401 - imports the scenario modules

    return list(REGISTRY)


def format_row(item: Scenario, trials: Trials) -> str:
    worst = trials.worst_recovery
    recovery = "n/a" if worst is None else f"{worst:.2f} s"
    held = f"{trials.held}/{trials.count}"
    cells = [item.area, item.name, str(trials.count), held, recovery, item.what_holds]
    return "| " + " | ".join(cells) + " |"


TABLE_HEADER = (
    "| area | scenario | trials | held | worst recovery | held means |\n|---|---|---|---|---|---|"
)
