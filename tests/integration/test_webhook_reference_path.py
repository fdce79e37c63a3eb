"""The reference controller's webhook path `/mutating`, served by the controller's own routes
over real HTTPS: a MutatingWebhookConfiguration carried over from the reference keeps working."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from erdma.controller.config import parse_config
from erdma.controller.webhooks import webhook_routes
from erdma.webhook import smcr
from tests.integration.admission_http import serving
from tests.integration.webhook_bodies import ILL_TYPED_PODS, UID, pod, review

pytest_plugins = ["tests.integration.webhook_support"]
IMAGE = "registry.example/erdma:2.0"


def routes(**values: Any) -> dict[str, Any]:
    return webhook_routes(parse_config({"region": "cn-hangzhou", "smcInitImage": IMAGE, **values}))


async def test_mutating_injects_smcr_init_like_our_path(webhook_cert: dict[str, Path], quiet):
    async with serving(routes(), webhook_cert) as post:
        status, reference = await post(review(pod()), smcr.REFERENCE_PATH)
        _status, ours = await post(review(pod()), smcr.PATH)
    assert status == 200
    assert reference == ours
    response = reference["response"]
    assert response["uid"] == UID and response["allowed"] is True
    (op,) = json.loads(base64.b64decode(response["patch"]))
    assert op["op"] == "add" and op["path"] == "/spec/initContainers/-"
    assert op["value"]["name"] == "smcr-init" and op["value"]["image"] == IMAGE


async def test_mutating_denies_an_ill_typed_pod_naming_the_field(webhook_cert, quiet):
    case = ILL_TYPED_PODS[0]
    async with serving(routes(), webhook_cert) as post:
        _status, reply = await post(case.body, smcr.REFERENCE_PATH)
    assert reply["response"]["status"]["code"] == 400
    assert case.names in reply["response"]["status"]["message"]


async def test_mutating_admits_untouched_with_injection_off(webhook_cert, quiet):
    """As the reference answered: a leftover configuration must not block pods with a 404."""
    async with serving(routes(enableInitContainerInject=False), webhook_cert) as post:
        status, reply = await post(review(pod()), smcr.REFERENCE_PATH)
        ours, _reply = await post(review(pod()), smcr.PATH)
    assert status == 200
    assert reply["response"] == {"uid": UID, "allowed": True}
    assert ours == 404  # the chart registers our path only with injection on
