"""AdmissionReview v1: read the request, write the response (with a base64 JSONPatch).

Handlers see an `AdmissionRequest` and return a `Verdict`; only this module knows the wire shape
(`admission.k8s.io/v1`, `response.uid` echoing `request.uid`, `patchType: JSONPatch`).
"""

from __future__ import annotations

import base64
import json
import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"


class ReviewError(ValueError):
    """A body that is not an AdmissionReview v1 request; answered with HTTP 400."""


class ObjectError(ValueError):
    """A well-formed review whose object has a field of the wrong type.

    Answered with a review that denies the object (status code 400) and says which field: the
    review itself is sound, so the caller gets a verdict it can show rather than a failed call.
    """


@dataclass(frozen=True)
class AdmissionRequest:
    uid: str
    operation: str
    kind: str
    namespace: str
    object: Mapping[str, Any]


@dataclass(frozen=True)
class Verdict:
    """A handler's answer: allow (optionally patched) or deny with a message."""

    allowed: bool = True
    message: str = ""
    patch: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    #: ``status.code`` of the response; by default 200 when allowed, 403 when denied
    code: int | None = None


Handler = Callable[[AdmissionRequest], Verdict]


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlevel = 3


def show_value(value: Any) -> str:
    """``value`` for an error message, cut short in length and depth: a hostile body may put
    megabytes in a field, or nest it hundreds of levels deep."""
    return _SHORT.repr(value)


def _field(doc: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = doc.get(key)
    if not isinstance(value, kind):
        raise ReviewError(f"{where}.{key} must be a {kind.__name__}, got {show_value(value)}")
    return value


def _optional_mapping(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ReviewError(f"{where}.{key} must be a dict, got {type(value).__name__}")
    return value


def _optional_str(doc: Mapping[str, Any], key: str, where: str) -> str:
    return "" if doc.get(key) is None else str(_field(doc, key, str, where))


def parse_review(body: bytes) -> AdmissionRequest:
    """The request inside an AdmissionReview v1 body; ReviewError names what is wrong.

    Every body that is not one, however odd, raises ReviewError and nothing else: empty,
    not UTF-8, not JSON, nested deeper than the parser's recursion limit (`json` raises
    RecursionError, e.g. at 10,000 levels), or JSON whose fields have the wrong types.
    """
    if not body.strip():
        raise ReviewError("body is empty; expected an AdmissionReview")
    try:
        doc = json.loads(body)
    except ValueError as exc:  # also not UTF-8, and integers over Python's 4300 digits
        raise ReviewError(f"body is not JSON: {exc}") from exc
    except RecursionError as exc:
        raise ReviewError("body is not an AdmissionReview: JSON nested too deeply") from exc
    if not isinstance(doc, dict):
        raise ReviewError("body must be a JSON object (an AdmissionReview)")
    if (doc.get("apiVersion"), doc.get("kind")) != (API_VERSION, KIND):
        found = f"{show_value(doc.get('apiVersion'))}/{show_value(doc.get('kind'))}"
        raise ReviewError(f"apiVersion/kind is {found}, expected {API_VERSION!r}/{KIND!r}")
    request = _field(doc, "request", dict, "AdmissionReview")
    _optional_mapping(request, "oldObject", "request")
    return AdmissionRequest(
        uid=_field(request, "uid", str, "request"),
        operation=_field(request, "operation", str, "request"),
        kind=_optional_str(_optional_mapping(request, "kind", "request"), "kind", "request.kind"),
        namespace=_optional_str(request, "namespace", "request"),
        object=_optional_mapping(request, "object", "request"),
    )


def review_response(uid: str, verdict: Verdict) -> dict[str, Any]:
    """The AdmissionReview v1 response body for `verdict`."""
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if verdict.message:
        response["status"] = {
            "code": verdict.code or (200 if verdict.allowed else 403),
            "message": verdict.message,
        }
    if verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(list(verdict.patch)).encode()).decode()
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}
