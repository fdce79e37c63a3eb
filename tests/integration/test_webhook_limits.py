"""Body limits and hostile bodies over real HTTPS: what the API server can send is reviewed,
anything else gets a 4xx with a reason, never a 500 or a traceback in the log.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator

import aiohttp
import pytest

from erdma.webhook import smcr
from erdma.webhook.review import Handler
from erdma.webhook.server import MAX_REVIEW_BYTES, start_webhook
from tests.integration.admission_http import SERVER_NAME
from tests.integration.webhook_bodies import UID, MiB, pod, review, review_of_size

pytest_plugins = ["tests.integration.webhook_support"]


@pytest.fixture
def webhook_routes() -> dict[str, Handler]:
    return {smcr.PATH: smcr.SmcrInjector("registry.example/erdma:1.0")}


@pytest.fixture
def webhook_path() -> str:
    return smcr.PATH


@pytest.mark.parametrize("size", [MiB * 3 // 2, 3 * MiB], ids=["1.5MiB", "3MiB"])
async def test_large_pod_is_reviewed_not_413(post, quiet, size):
    status, reply = await post(review_of_size(size))
    assert status == 200, reply
    assert reply["response"]["uid"] == UID
    assert reply["response"]["allowed"] is True
    assert reply["response"]["patchType"] == "JSONPatch"


async def test_update_with_two_3mib_objects_is_reviewed(post, quiet):
    # object and oldObject both near the API server's 3 MiB body limit
    big = pod(3 * MiB)
    body = review(big, operation="UPDATE", old=big)
    assert 6 * MiB < len(body) <= MAX_REVIEW_BYTES
    status, reply = await post(body)
    assert status == 200, reply
    assert reply["response"] == {"uid": UID, "allowed": True}


async def test_body_at_the_limit_is_reviewed(post, quiet):
    status, reply = await post(review_of_size(MAX_REVIEW_BYTES))
    assert status == 200, reply
    assert reply["response"]["allowed"] is True


async def test_body_over_the_limit_is_413_with_the_limit_named(post, quiet, caplog):
    status, reply = await post(review_of_size(MAX_REVIEW_BYTES + 1))
    assert status == 413
    assert f"{MAX_REVIEW_BYTES} bytes" in reply["error"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(f"{MAX_REVIEW_BYTES + 1} bytes refused" in w for w in warnings), warnings


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (b"", "body is empty"),
        (b"   \n", "body is empty"),
        (b"{not json", "body is not JSON"),
        (b"\xff\xfe\x00garbage", "body is not JSON"),
        (b"[" * 10_000 + b"]" * 10_000, "nested too deeply"),
        (b'{"a":' * 10_000 + b"1" + b"}" * 10_000, "nested too deeply"),
        (b"[]", "JSON object"),
        (b"null", "JSON object"),
        (b'{"apiVersion": "v1", "kind": "Pod"}', "expected"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request must be"),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",'
            b' "request": {"uid": "u", "operation": "CREATE", "object": "pod"}}',
            "request.object must be",
        ),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",'
            b' "request": {"uid": "u", "operation": "CREATE", "namespace": 7}}',
            "request.namespace must be",
        ),
    ],
    ids=[
        "empty",
        "whitespace",
        "malformed",
        "not-utf8",
        "nested-arrays-10000",
        "nested-objects-10000",
        "array",
        "null",
        "wrong-kind",
        "no-request",
        "object-not-a-mapping",
        "namespace-not-a-string",
    ],
)
async def test_bad_bodies_get_400_with_a_reason(post, quiet, body, complaint):
    status, reply = await post(body)
    assert status == 400, reply
    assert complaint in reply["error"]


async def test_server_still_serves_after_bad_bodies(post, quiet):
    await post(b"[" * 10_000)
    await post(review_of_size(MAX_REVIEW_BYTES + 1))
    status, reply = await post(review(pod()))
    assert status == 200 and reply["response"]["uid"] == UID


async def test_chunked_body_over_the_limit_is_413(webhook_cert, webhook_routes, quiet):
    """No Content-Length to go by: the limit holds while the body streams in."""
    server = await start_webhook(
        webhook_routes, webhook_cert["tls.crt"], webhook_cert["tls.key"], "127.0.0.1", 0
    )
    trust = ssl.create_default_context(cafile=str(webhook_cert["ca.crt"]))
    body = review_of_size(MAX_REVIEW_BYTES + MiB)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"https://127.0.0.1:{server.port}{smcr.PATH}",
                data=chunks(),
                ssl=trust,
                server_hostname=SERVER_NAME,
            ) as reply,
        ):
            assert reply.status == 413
            assert f"{MAX_REVIEW_BYTES} bytes" in (await reply.json())["error"]
    finally:
        await server.stop()
