"""How a reconcile reads an error of the API server: outage, throttling, conflict or a bug."""

from __future__ import annotations

import datetime
import email.utils

import httpx2 as httpx
import pytest
from lightkube.core.exceptions import ApiError

from erdma.controller import metrics
from erdma.controller.api_errors import MAX_RETRY_AFTER, classify

REQUEST = httpx.Request("POST", "https://127.0.0.1/apis/network.alibabacloud.com/v1/erdmadevices")


def answered(
    code: int, *, json: bool = True, headers: dict[str, str] | None = None
) -> httpx.HTTPStatusError:
    if json:
        body = {"kind": "Status", "code": code, "message": "no"}
        response = httpx.Response(code, json=body, headers=headers, request=REQUEST)
        return ApiError(request=REQUEST, response=response)
    response = httpx.Response(code, text="<html>busy</html>", headers=headers, request=REQUEST)
    return httpx.HTTPStatusError("busy", request=REQUEST, response=response)


@pytest.mark.parametrize(
    ("error", "result"),
    [
        (answered(429), metrics.RESULT_API_THROTTLED),
        (answered(500), metrics.RESULT_API_UNAVAILABLE),
        (answered(503, json=False), metrics.RESULT_API_UNAVAILABLE),
        (answered(504, json=False), metrics.RESULT_API_UNAVAILABLE),
        (answered(409), metrics.RESULT_CONFLICT),
        (httpx.ConnectError("refused", request=REQUEST), metrics.RESULT_API_UNAVAILABLE),
        (httpx.ReadTimeout("slow", request=REQUEST), metrics.RESULT_API_UNAVAILABLE),
    ],
)
def test_the_api_server_turning_a_pass_away_is_not_a_bug(error: Exception, result: str):
    trouble = classify(error)
    assert trouble is not None and trouble.result == result
    assert trouble.outage == (result != metrics.RESULT_CONFLICT)


@pytest.mark.parametrize(
    "error",
    [answered(400), answered(403), answered(404), answered(422), KeyError("spec"), ValueError()],
)
def test_anything_else_is_a_bug_that_keeps_its_traceback(error: Exception):
    assert classify(error) is None


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("3", 3.0),
        ("0.5", 0.5),
        ("-4", 0.0),
        ("86400", MAX_RETRY_AFTER),
        ("soon", None),
        ("nan", None),
        ("", None),
    ],
)
def test_retry_after_in_seconds_is_honoured_within_bounds(header: str, seconds: float | None):
    trouble = classify(answered(429, headers={"Retry-After": header} if header else {}))
    assert trouble is not None and trouble.retry_after == seconds


def test_retry_after_as_an_http_date_counts_from_now():
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=30)
    header = email.utils.format_datetime(later, usegmt=True)
    trouble = classify(answered(503, json=False, headers={"Retry-After": header}))
    assert trouble is not None and trouble.retry_after is not None
    assert 25 <= trouble.retry_after <= 30
