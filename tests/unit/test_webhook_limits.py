"""`parse_review` on hostile bodies: each raises ReviewError with a reason, never anything else."""

from __future__ import annotations

import json

import pytest

from erdma.webhook.review import ReviewError, parse_review

ENVELOPE = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}


def review(**request: object) -> bytes:
    return json.dumps(
        {**ENVELOPE, "request": {"uid": "u", "operation": "CREATE", **request}}
    ).encode()


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (b"", "body is empty"),
        (b" \t\r\n", "body is empty"),
        (b"{not json", "body is not JSON"),
        (b"\xff\xfe\x00garbage", "body is not JSON"),
        (b"[" * 10_000 + b"]" * 10_000, "nested too deeply"),
        (b'{"a":' * 10_000 + b"1" + b"}" * 10_000, "nested too deeply"),
        (b"[" * 10_000, "nested too deeply"),
        (b"42", "JSON object"),
        (json.dumps({**ENVELOPE, "request": []}).encode(), "request must be a dict"),
        (review(object=[1]), "request.object must be a dict, got list"),
        (review(oldObject="pod"), "request.oldObject must be a dict, got str"),
        (review(namespace=["ns"]), "request.namespace must be a str"),
    ],
)
def test_bad_bodies_raise_review_error(body, complaint):
    with pytest.raises(ReviewError, match=complaint):
        parse_review(body)


def test_deep_nesting_inside_a_review_is_refused():
    deep = "[" * 10_000 + "]" * 10_000
    body = review().replace(b'"u"', b'"u", "x": ' + deep.encode(), 1)
    with pytest.raises(ReviewError, match="nested too deeply"):
        parse_review(body)


def test_huge_field_is_not_echoed_whole():
    with pytest.raises(ReviewError) as caught:
        parse_review(review(uid=["x" * 1_000_000]))
    assert len(str(caught.value)) < 300


def test_absent_or_null_objects_are_empty():
    assert parse_review(review()).object == {}
    assert parse_review(review(object=None, oldObject=None, namespace=None)).object == {}
