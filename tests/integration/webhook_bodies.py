"""AdmissionReview bodies for the webhook tests and the admission fault scenarios.

One place builds them so the tests and `bench/chaos/admission_faults.py` send the same bodies:
a pod both webhooks read in full, reviews of an exact size, and the ill-typed set (reviews no
API server sends, each with the field a correct answer names).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from erdma.api.names import SMCR_ANNOTATION

MiB = 1024 * 1024
UID = "705ab4f5-6393-11e8-b7cc-42010a800002"


def pod(blob_bytes: int = 0) -> dict[str, Any]:
    """A pod every webhook reads in full: an SMC-R pod (annotated, asking for `aliyun/erdma`)
    that also asks for `rdma/hca` without hostNetwork, after a plain init container.

    ``blob_bytes`` of annotation make it as big as a pod can get.
    """
    annotations = {SMCR_ANNOTATION: "true"}
    if blob_bytes:
        annotations["example.com/blob"] = "x" * blob_bytes
    limits = {"aliyun/erdma": "1", "rdma/hca": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "big", "annotations": annotations},
        "spec": {
            "initContainers": [{"name": "fetch", "image": "busybox"}],
            "containers": [{"name": "main", "image": "app", "resources": {"limits": limits}}],
        },
    }


def request(obj: Any, operation: str = "CREATE", old: Any = None) -> dict[str, Any]:
    """The ``request`` of a review of ``obj`` (a Pod in namespace ``default``)."""
    doc: dict[str, Any] = {
        "uid": UID,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": operation,
        "namespace": "default",
        "object": obj,
    }
    if old is not None:
        doc["oldObject"] = old
    return doc


def envelope(req: Any) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def review(obj: Any, operation: str = "CREATE", old: Any = None) -> bytes:
    return json.dumps(envelope(request(obj, operation, old))).encode()


def review_of_size(size: int, operation: str = "CREATE", with_old: bool = False) -> bytes:
    """A valid review of exactly ``size`` bytes; ``with_old`` splits it over ``object`` and an
    ``oldObject`` of (nearly) the same size, as an UPDATE carries them."""

    def build(blob: int, extra: int) -> bytes:
        return review(pod(blob + extra), operation, pod(blob) if with_old else None)

    copies = 2 if with_old else 1
    blob, extra = divmod(size - (len(build(1, 0)) - copies), copies)
    body = build(blob, extra)
    assert len(body) == size, (len(body), size)
    return body


@dataclass(frozen=True)
class IllTyped:
    """A review no API server sends; ``names`` is what a correct answer says is wrong.

    ``envelope_broken``: the review itself is malformed, so the answer is HTTP 400 with
    ``{"error": ...}``; otherwise the pod is, and the answer is an AdmissionReview denying it
    with status code 400.
    """

    id: str
    body: bytes
    names: str
    envelope_broken: bool


def _pod_with(change: Callable[[dict[str, Any]], object]) -> bytes:
    obj = pod()
    change(obj)
    return review(obj)


def _request_with(change: Callable[[dict[str, Any]], object]) -> bytes:
    req = request(pod())
    change(req)
    return json.dumps(envelope(req)).encode()


def _main(obj: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = obj["spec"]["containers"][0]
    return container


def _deep(levels: int) -> Any:
    """A list nested ``levels`` deep: under the parser's limit, far over a message's length."""
    value: Any = []
    for _ in range(levels):
        value = [value]
    return value


ILL_TYPED_PODS = [
    IllTyped("spec-a-list", _pod_with(lambda p: p.update(spec=[1])), "spec must be", False),
    IllTyped("metadata-a-string", _pod_with(lambda p: p.update(metadata="m")), "metadata ", False),
    IllTyped(
        "containers-a-string",
        _pod_with(lambda p: p["spec"].update(containers="main")),
        "spec.containers must be",
        False,
    ),
    IllTyped(
        "init-containers-an-object",
        _pod_with(lambda p: p["spec"].update(initContainers={"name": "x"})),
        "spec.initContainers must be",
        False,
    ),
    IllTyped(
        "container-a-number",
        _pod_with(lambda p: p["spec"]["containers"].insert(0, 7)),
        "spec.containers[0] must be",
        False,
    ),
    IllTyped(
        "container-deeply-nested",
        _pod_with(lambda p: p["spec"]["containers"].append(_deep(900))),
        "spec.containers[1] must be",
        False,
    ),
    IllTyped(
        "container-name-a-number",
        _pod_with(lambda p: _main(p).update(name=42)),
        "spec.containers[0].name must be",
        False,
    ),
    IllTyped(
        "resources-a-list",
        _pod_with(lambda p: _main(p).update(resources=["aliyun/erdma"])),
        "spec.containers[0].resources must be",
        False,
    ),
    IllTyped(
        "limits-a-list",
        _pod_with(lambda p: _main(p)["resources"].update(limits=["aliyun/erdma"])),
        "spec.containers[0].resources.limits must be",
        False,
    ),
    IllTyped(
        "limit-a-list",
        _pod_with(lambda p: _main(p)["resources"]["limits"].update({"aliyun/erdma": ["1"]})),
        "spec.containers[0].resources.limits['aliyun/erdma'] must be",
        False,
    ),
    IllTyped(
        "request-a-boolean",
        _pod_with(lambda p: _main(p)["resources"].update(requests={"rdma/hca": True})),
        "spec.containers[0].resources.requests['rdma/hca'] must be",
        False,
    ),
    IllTyped(
        "annotations-a-list",
        _pod_with(lambda p: p["metadata"].update(annotations=[SMCR_ANNOTATION])),
        "metadata.annotations must be",
        False,
    ),
    IllTyped(
        "smcr-annotation-a-boolean",
        _pod_with(lambda p: p["metadata"]["annotations"].update({SMCR_ANNOTATION: True})),
        f"metadata.annotations['{SMCR_ANNOTATION}'] must be",
        False,
    ),
    IllTyped(
        "other-annotation-a-number",
        _pod_with(lambda p: p["metadata"]["annotations"].update({"example.com/n": 3})),
        "metadata.annotations['example.com/n'] must be",
        False,
    ),
    IllTyped(
        "name-a-number",
        _pod_with(lambda p: p["metadata"].update(name=12)),
        "metadata.name must be",
        False,
    ),
    IllTyped(
        "host-network-yes",
        _pod_with(lambda p: p["spec"].update(hostNetwork="yes")),
        "spec.hostNetwork must be",
        False,
    ),
    IllTyped(
        "host-network-one",
        _pod_with(lambda p: p["spec"].update(hostNetwork=1)),
        "spec.hostNetwork must be",
        False,
    ),
]

ILL_TYPED_ENVELOPES = [
    IllTyped("request-null", json.dumps(envelope(None)).encode(), "request must be", True),
    IllTyped("uid-missing", _request_with(lambda r: r.pop("uid")), "request.uid must be", True),
    IllTyped("uid-a-number", _request_with(lambda r: r.update(uid=5)), "request.uid must be", True),
    IllTyped(
        "operation-a-list",
        _request_with(lambda r: r.update(operation=["CREATE"])),
        "request.operation must be",
        True,
    ),
    IllTyped(
        "kind-a-string", _request_with(lambda r: r.update(kind="Pod")), "request.kind must be", True
    ),
    IllTyped(
        "kind-kind-a-number",
        _request_with(lambda r: r.update(kind={"kind": 1})),
        "request.kind.kind must be",
        True,
    ),
    IllTyped(
        "object-a-list",
        _request_with(lambda r: r.update(object=[pod()])),
        "request.object must be",
        True,
    ),
    IllTyped(
        "old-object-a-string",
        _request_with(lambda r: r.update(oldObject="pod")),
        "request.oldObject must be",
        True,
    ),
    IllTyped(
        "integer-of-5000-digits",
        _request_with(lambda r: r.update(uid=0)).replace(b'"uid": 0', b'"uid": ' + b"9" * 5000),
        "body is not JSON",
        True,
    ),
]

ILL_TYPED = ILL_TYPED_PODS + ILL_TYPED_ENVELOPES


def sweep(doc: Any, wrong: tuple[Any, ...]) -> list[tuple[str, Any]]:
    """``doc`` with each node in turn replaced by each of ``wrong``: (path, changed copy)."""
    found: list[tuple[str, Any]] = []

    def walk(node: Any, path: list[Any]) -> None:
        for value in wrong:
            found.append((_path(path), _replaced(doc, path, value)))
        if isinstance(node, dict | list):
            for key, child in node.items() if isinstance(node, dict) else enumerate(node):
                walk(child, [*path, key])

    walk(doc, [])
    return found


def _path(path: list[Any]) -> str:
    return "".join(f"[{key!r}]" for key in path) or "<root>"


def _replaced(doc: Any, path: list[Any], value: Any) -> Any:
    if not path:
        return value
    changed = copy.deepcopy(doc)
    parent = changed
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return changed
