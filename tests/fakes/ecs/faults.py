"""Trouble on demand: latency, a per-second rate limit, injected errors and delays.

ECS throttles per account (``Throttling.User``, HTTP 400), fails now and then with 5xx, and
can be slower than a client's timeout.  Tests and benchmarks script these here and read back
how many calls each action received, and when (``log``).

A fault with ``delay`` holds the request before ECS sees it (with a ``code``, it is then
refused without being carried out); one with ``answer_delay`` is carried out at once and only
its answer is held, so a client that dies meanwhile never learns that the call took effect.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tests.fakes.ecs.state import EcsApiError

THROTTLED_MESSAGE = "Request was denied due to user flow control."


@dataclass
class Fault:
    """One scripted misbehaviour for ``action`` (``"*"`` for any), used ``times`` times, on the
    calls whose parameters include ``where`` (e.g. ``{"InstanceId": "i-1"}``).

    With ``code`` empty the call succeeds, only ``delay`` seconds late (a client timeout).
    """

    action: str
    code: str = ""
    status: int = 400
    message: str = ""
    delay: float = 0.0
    times: int = 1
    answer_delay: float = 0.0
    where: Mapping[str, str] = field(default_factory=dict)

    def matches(self, action: str, params: Mapping[str, str]) -> bool:
        """The fault is for this action and every ``where`` parameter has that value."""
        return self.action in ("*", action) and all(
            params.get(k) == v for k, v in self.where.items()
        )


@dataclass(frozen=True)
class Admission:
    """What to do with one call: hold it, refuse it, hold its answer."""

    delay: float
    error: EcsApiError | None
    answer_delay: float = 0.0


@dataclass(frozen=True)
class Received:
    """One call as ECS saw it: when (the plan's clock), which action, the error code answered."""

    at: float
    action: str
    code: str


class FaultPlan:
    """What the next calls should suffer, and what the calls so far looked like."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.latency = 0.0
        self._rate = 0.0
        self._tokens = 0.0
        self._stamp = clock()
        self._clock = clock
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self.calls: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        #: (action, code) of calls the world itself refused (an ENI in the wrong state, no
        #: room on a card): what the controller asked for that ECS would not do
        self.refused: Counter[tuple[str, str]] = Counter()
        self.log: list[Received] = []

    @property
    def rate_limit(self) -> float:
        """Calls per second the account may make (0 means unlimited)."""
        return self._rate

    @rate_limit.setter
    def rate_limit(self, per_second: float) -> None:
        with self._lock:
            self._rate = per_second
            self._tokens = per_second
            self._stamp = self._clock()

    def inject(
        self,
        action: str = "*",
        code: str = "",
        *,
        status: int = 400,
        message: str = "",
        delay: float = 0.0,
        times: int = 1,
        answer_delay: float = 0.0,
        where: Mapping[str, str] | None = None,
    ) -> None:
        """Queue a fault; e.g. ``inject("CreateNetworkInterface", "Throttling.User", times=3)``."""
        with self._lock:
            fault = Fault(action, code, status, message, delay, times, answer_delay, where or {})
            self._faults.append(fault)

    def clear(self) -> None:
        """Drop every queued fault (the rate limit and latency stay)."""
        with self._lock:
            self._faults.clear()

    def throttle(self, action: str = "*", times: int = 1) -> None:
        """Make the next ``times`` calls of ``action`` fail with ``Throttling.User``."""
        self.inject(action, "Throttling.User", status=400, message=THROTTLED_MESSAGE, times=times)

    def _take(self, action: str, params: Mapping[str, str]) -> Fault | None:
        for fault in self._faults:
            if fault.matches(action, params):
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    def _over_rate(self) -> bool:
        if self._rate <= 0:
            return False
        now = self._clock()
        self._tokens = min(self._rate, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now
        if self._tokens < 1:
            return True
        self._tokens -= 1
        return False

    def admit(self, action: str, params: Mapping[str, str] | None = None) -> Admission:
        """Count and log a call; say how long to hold it, the error to answer, if any, and
        how long to hold the answer of a call that is carried out."""
        with self._lock:
            self.calls[action] += 1
            fault = self._take(action, params or {})
            error: EcsApiError | None = None
            delay = self.latency
            if fault is not None:
                delay += fault.delay
                if fault.code:
                    error = EcsApiError(fault.code, fault.message or fault.code, fault.status)
            if error is None and self._over_rate():
                error = EcsApiError("Throttling.User", THROTTLED_MESSAGE, 400)
            if error is not None:
                self.errors[error.code] += 1
            self.log.append(Received(self._clock(), action, error.code if error else ""))
            held = fault.answer_delay if fault is not None and error is None else 0.0
            return Admission(delay, error, held)

    def total_calls(self) -> int:
        """All calls received, failed ones included."""
        return sum(self.calls.values())
