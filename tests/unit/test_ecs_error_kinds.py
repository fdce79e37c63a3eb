"""ECS error codes become the reconciler's closed set of error kinds, retryability unchanged."""

from __future__ import annotations

import pytest

from erdma.controller.cloud import ErrorKind
from erdma.controller.providers.ecs.errors import ecs_error, kind_of


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("Throttling.User", 400, ErrorKind.THROTTLED),
        ("ServiceUnavailable", 503, ErrorKind.TRANSIENT),
        ("SomethingNew", 500, ErrorKind.TRANSIENT),
        ("Timeout", 0, ErrorKind.TRANSIENT),
        ("InvalidEniId.NotFound", 404, ErrorKind.NOT_FOUND),
        ("QuotaExceed.Eri", 403, ErrorKind.QUOTA),
        ("InvalidOperation.InvalidEniState", 403, ErrorKind.CONFLICT),
        ("Forbidden.RAM", 403, ErrorKind.REFUSED),
        ("InvalidAccessKeyId.NotFound", 404, ErrorKind.REFUSED),
    ],
)
def test_ecs_code_maps_to_kind(code, status, kind):
    assert kind_of(code, status) is kind


def test_only_throttled_and_transient_errors_are_retried():
    assert {k for k in ErrorKind if k.retryable} == {ErrorKind.THROTTLED, ErrorKind.TRANSIENT}
    assert ecs_error("Throttling.User", "A", "m", http_status=400).retryable
    assert not ecs_error("QuotaExceed.Eri", "A", "m", http_status=403).retryable


def test_ecs_error_carries_a_hint_for_people():
    error = ecs_error("Forbidden.RAM", "AttachNetworkInterface", "denied", http_status=403)
    assert error.hint.startswith("grant ecs:AttachNetworkInterface to the controller's RAM")
    assert "(hint: grant ecs:AttachNetworkInterface" in str(error)
