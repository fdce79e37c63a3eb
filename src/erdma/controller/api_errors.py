"""What an error from the Kubernetes API server means for a reconcile pass.

A pass cut short by the API server is not a bug: the server was unreachable or answered 5xx
(``apiUnavailable``), it shed load with 429 (``apiThrottled``), or another writer got there
first with 409 (``conflict``). Each is retried without a traceback, no sooner than the server's
``Retry-After`` says. The status comes from the HTTP response, not from its body: a proxy or
load balancer in front of the API server answers 503 with a page of text, which lightkube
does not turn into its ``ApiError`` (it parses JSON bodies only), and that used to count as
a crash.
"""

from __future__ import annotations

import datetime
import email.utils
from dataclasses import dataclass

import httpx2 as httpx

from erdma.controller import metrics

#: the longest ``Retry-After`` honoured (seconds); a larger one is read as this
MAX_RETRY_AFTER = 600.0


@dataclass(frozen=True)
class ApiTrouble:
    """A pass the API server cut short: the metric result and the server's wish, if any."""

    result: str
    retry_after: float | None = None

    @property
    def outage(self) -> bool:
        """The server cannot serve now (as opposed to a concurrent writer)."""
        return self.result != metrics.RESULT_CONFLICT


def classify(exc: BaseException) -> ApiTrouble | None:
    """The trouble ``exc`` stands for, or None when it is something else (a bug)."""
    if isinstance(exc, httpx.TransportError):
        return ApiTrouble(metrics.RESULT_API_UNAVAILABLE)
    if not isinstance(exc, httpx.HTTPStatusError):
        return None
    code = exc.response.status_code
    retry_after = _retry_after(exc.response.headers.get("Retry-After"))
    if code == 429:
        return ApiTrouble(metrics.RESULT_API_THROTTLED, retry_after)
    if code >= 500:
        return ApiTrouble(metrics.RESULT_API_UNAVAILABLE, retry_after)
    if code == 409:
        return ApiTrouble(metrics.RESULT_CONFLICT)
    return None


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date); None if absent
    or unreadable, so a garbled header falls back to the usual backoff."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = (when - datetime.datetime.now(datetime.UTC)).total_seconds()
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)
