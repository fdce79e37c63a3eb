"""The SMC-R mutating webhook over real HTTPS with AdmissionReview v1 bodies."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from erdma.api.names import SMCR_ANNOTATION
from erdma.webhook import smcr
from erdma.webhook.review import Handler
from erdma.webhook.server import tls_context

pytest_plugins = ["tests.integration.webhook_support"]
IMAGE = "registry.example/erdma:1.0"


@pytest.fixture
def webhook_routes() -> dict[str, Handler]:
    return {smcr.PATH: smcr.SmcrInjector(IMAGE)}


@pytest.fixture
def webhook_path() -> str:
    return smcr.PATH


def pod(
    annotation: str | None = "true",
    resource: str = "aliyun/erdma",
    host_network: bool = False,
    init_containers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "app", "resources": {"limits": {resource: "1"}}}]
    }
    if host_network:
        spec["hostNetwork"] = True
    if init_containers is not None:
        spec["initContainers"] = init_containers
    annotations = {} if annotation is None else {SMCR_ANNOTATION: annotation}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"annotations": annotations},
        "spec": spec,
    }


def review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": operation,
            "namespace": "team",
            "object": obj,
        },
    }


def apply_patch(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """Apply the JSONPatch "add" operations the webhook returns, as the API server would."""
    result = copy.deepcopy(obj)
    for op in json.loads(base64.b64decode(response["patch"])):
        assert op["op"] == "add"
        *parents, last = op["path"].lstrip("/").split("/")
        target: Any = result
        for part in parents:
            target = target[part]
        if last == "-":
            target.append(op["value"])
        else:
            target[last] = op["value"]
    return result


@pytest.mark.parametrize("value", ["true", "TRUE", "1"])
async def test_annotated_erdma_pod_gets_the_smcr_init_container(post, value):
    status, body = await post(review(pod(value)))

    response = body["response"]
    assert status == 200
    assert (body["apiVersion"], body["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert response["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    (init,) = apply_patch(pod(value), response)["spec"]["initContainers"]
    assert init["name"] == "smcr-init"
    assert init["image"] == IMAGE
    assert init["command"] == ["erdma", "smcr-init"]
    assert init["resources"]["limits"] == {"aliyun/erdma": "1"}
    assert init["resources"]["requests"] == {"aliyun/erdma": "1"}
    # writes /proc/sys in the pod netns: needs privilege and root whatever the image user is
    assert init["securityContext"] == {"privileged": True, "runAsUser": 0}


async def test_injected_container_runs_after_the_users_init_containers(post):
    obj = pod(init_containers=[{"name": "fetch", "image": "busybox"}])
    _status, body = await post(review(obj))
    names = [c["name"] for c in apply_patch(obj, body["response"])["spec"]["initContainers"]]
    assert names == ["fetch", "smcr-init"]


async def test_already_injected_pod_is_not_patched_twice(post):
    obj = pod(init_containers=[{"name": "smcr-init", "image": IMAGE}])
    _status, body = await post(review(obj))
    assert body["response"]["allowed"] is True and "patch" not in body["response"]


@pytest.mark.parametrize(
    "obj",
    [
        pod(host_network=True),
        pod(annotation=None),
        pod(annotation="false"),
        pod(annotation="0"),
        pod(resource="rdma/hca"),
        pod(resource="aliyun/erdma-other"),
    ],
    ids=["hostNetwork", "no-annotation", "false", "zero", "rdma-hca-only", "similar-name"],
)
async def test_pods_that_do_not_qualify_are_admitted_untouched(post, obj):
    status, body = await post(review(obj))
    assert status == 200
    assert body["response"]["allowed"] is True
    assert "patch" not in body["response"]


async def test_host_network_pod_with_garbage_value_is_not_judged(post):
    _status, body = await post(review(pod(annotation="yes", host_network=True)))
    assert body["response"]["allowed"] is True
    assert "patch" not in body["response"]


@pytest.mark.parametrize("value", ["yes", "enabled", "tRUE", ""])
async def test_garbage_value_is_refused_naming_value_and_choices(post, value):
    _status, body = await post(review(pod(annotation=value)))
    response = body["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert (
        f"invalid value {value!r} for annotation {SMCR_ANNOTATION}" in response["status"]["message"]
    )
    assert "1, t, T, TRUE, true, True" in response["status"]["message"]


async def test_updates_are_not_mutated(post):
    _status, body = await post(review(pod(), operation="UPDATE"))
    assert body["response"] == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (b"{not json", "body is not JSON"),
        ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}, "expected"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request must be"),
    ],
)
async def test_malformed_reviews_get_400_with_the_reason(post, body, complaint):
    status, reply = await post(body)
    assert status == 400
    assert complaint in reply["error"]


async def test_unknown_path_is_404(post):
    status, _reply = await post(review(pod()), path="/validate-unknown")
    assert status == 404


def test_unreadable_certificate_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"cannot load TLS certificate .*missing\.crt"):
        tls_context(tmp_path / "missing.crt", tmp_path / "missing.key")
