"""AdmissionReview v1: read the request, write the response (with a base64 JSONPatch).

Handlers see an `AdmissionRequest` and return a `Verdict`; only this module knows the wire shape
(`admission.k8s.io/v1`, `response.uid` echoing `request.uid`, `patchType: JSONPatch`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"


class ReviewError(ValueError):
    """A body that is not an AdmissionReview v1 request; answered with HTTP 400."""


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


Handler = Callable[[AdmissionRequest], Verdict]


def _show(value: Any, limit: int = 80) -> str:
    """`value` for an error message, cut short: a hostile body may put megabytes in a field."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def _field(doc: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = doc.get(key)
    if not isinstance(value, kind):
        raise ReviewError(f"{where}.{key} must be a {kind.__name__}, got {_show(value)}")
    return value


def _optional_mapping(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ReviewError(f"{where}.{key} must be a dict, got {type(value).__name__}")
    return value


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
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReviewError(f"body is not JSON: {exc}") from exc
    except RecursionError as exc:
        raise ReviewError("body is not an AdmissionReview: JSON nested too deeply") from exc
    if not isinstance(doc, dict):
        raise ReviewError("body must be a JSON object (an AdmissionReview)")
    if (doc.get("apiVersion"), doc.get("kind")) != (API_VERSION, KIND):
        raise ReviewError(
            f"apiVersion/kind is {_show(doc.get('apiVersion'))}/{_show(doc.get('kind'))}, "
            f"expected {API_VERSION!r}/{KIND!r}"
        )
    request = _field(doc, "request", dict, "AdmissionReview")
    kind = request.get("kind") or {}
    if not isinstance(request.get("namespace") or "", str):
        raise ReviewError(f"request.namespace must be a str, got {_show(request['namespace'])}")
    _optional_mapping(request, "oldObject", "request")
    return AdmissionRequest(
        uid=_field(request, "uid", str, "request"),
        operation=_field(request, "operation", str, "request"),
        kind=kind.get("kind", "") if isinstance(kind, dict) else "",
        namespace=request.get("namespace") or "",
        object=_optional_mapping(request, "object", "request"),
    )


def review_response(uid: str, verdict: Verdict) -> dict[str, Any]:
    """The AdmissionReview v1 response body for `verdict`."""
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if verdict.message:
        response["status"] = {
            "code": 200 if verdict.allowed else 403,
            "message": verdict.message,
        }
    if verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(list(verdict.patch)).encode()).decode()
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}
