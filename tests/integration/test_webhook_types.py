"""Hand-made AdmissionReviews with fields of the wrong type, over real HTTPS, at every webhook.

The API server only sends pods it has decoded into its own types; a probe, a test or a replayed
body can carry anything. Each must get a 400 naming the field (a broken review) or a review that
denies the pod naming the field (a broken pod): never a 500, never a traceback in the log.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from erdma.webhook import hostnetwork, smcr
from erdma.webhook.review import Handler
from tests.integration.webhook_bodies import (
    ILL_TYPED_ENVELOPES,
    ILL_TYPED_PODS,
    UID,
    IllTyped,
    envelope,
    pod,
    request,
    review,
    sweep,
)

pytest_plugins = ["tests.integration.webhook_support"]
PATHS = [smcr.PATH, hostnetwork.PATH]


@pytest.fixture
def webhook_routes() -> dict[str, Handler]:
    return {
        smcr.PATH: smcr.SmcrInjector("registry.example/erdma:1.0"),
        hostnetwork.PATH: hostnetwork.HostNetworkRdmaValidator(),
    }


@pytest.fixture
def webhook_path() -> str:
    return smcr.PATH


async def test_the_well_typed_pod_is_read_in_full_by_both(post, quiet):
    """The pod the cases break: injected at one path, refused for hostNetwork at the other."""
    _status, mutated = await post(review(pod()), smcr.PATH)
    assert mutated["response"]["patchType"] == "JSONPatch"
    _status, denied = await post(review(pod()), hostnetwork.PATH)
    assert denied["response"]["status"]["code"] == 403
    assert "not hostNetwork" in denied["response"]["status"]["message"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", ILL_TYPED_PODS, ids=[c.id for c in ILL_TYPED_PODS])
async def test_ill_typed_pod_is_denied_naming_the_field(post, quiet, case: IllTyped, path):
    status, reply = await post(case.body, path)
    assert status == 200, reply
    response = reply["response"]
    assert response["uid"] == UID
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    message = response["status"]["message"]
    assert message.startswith("malformed pod in AdmissionReview: "), message
    assert case.names in message
    assert "got " in message and len(message) < 400


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", ILL_TYPED_ENVELOPES, ids=[c.id for c in ILL_TYPED_ENVELOPES])
async def test_ill_typed_review_is_400_naming_the_field(post, quiet, case: IllTyped, path):
    status, reply = await post(case.body, path)
    assert status == 400, reply
    assert case.names in reply["error"]
    assert len(reply["error"]) < 400


@pytest.mark.parametrize("path", PATHS)
async def test_other_kinds_are_not_read_as_pods(post, quiet, path):
    req = request({"spec": [1], "metadata": "cm"})
    req["kind"] = {"group": "", "version": "v1", "kind": "ConfigMap"}
    status, reply = await post(envelope(req), path)
    assert status == 200 and reply["response"] == {"uid": UID, "allowed": True}


@pytest.mark.parametrize(("amount", "injected"), [(1, True), (2.5, True), (0, False), (-1, False)])
async def test_numeric_quantities_count_like_their_strings(post, quiet, amount, injected):
    obj = pod()
    obj["spec"]["containers"][0]["resources"]["limits"] = {"aliyun/erdma": amount}
    _status, reply = await post(review(obj), smcr.PATH)
    assert ("patch" in reply["response"]) is injected
    obj["spec"]["containers"][0]["resources"]["limits"] = {"rdma/hca": amount}
    _status, reply = await post(review(obj), hostnetwork.PATH)
    assert reply["response"]["allowed"] is not injected


WRONG: tuple[Any, ...] = (None, 0, 1.5, True, "x", [], {}, [1], {"a": 1})


async def test_any_field_of_any_type_gets_an_answer(post, quiet):
    """Every node of the review, in turn, replaced by each wrong value, at both webhooks."""
    for path in PATHS:
        for where, doc in sweep(envelope(request(pod())), WRONG):
            status, reply = await post(json.dumps(doc).encode(), path)
            assert status in (200, 400), (path, where, status, reply)
            if status == 400:
                assert reply["error"], (path, where)
                continue
            response: dict[str, Any] = reply["response"]
            assert response["uid"] == doc["request"]["uid"], (path, where)
            assert isinstance(response["allowed"], bool), (path, where)
            if not response["allowed"]:
                assert response["status"]["code"] in (400, 403), (path, where, response)
                assert response["status"]["message"], (path, where)
    status, reply = await post(review(pod()), smcr.PATH)
    assert status == 200 and "patch" in reply["response"]
