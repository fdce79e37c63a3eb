"""The SMC-R mutating webhook over real HTTPS with AdmissionReview v1 bodies."""

from __future__ import annotations

import base64
import copy
import datetime
import ipaddress
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from erdma.agent.smcr import SMCR_ANNOTATION
from erdma.webhook import smcr
from erdma.webhook.server import start_webhook, tls_context

IMAGE = "registry.example/erdma:1.0"


@pytest.fixture(scope="module")
def cert(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, like the one the chart's cert job makes."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "erdma-webhook")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    certfile, keyfile = folder / "tls.crt", folder / "tls.key"
    certfile.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return certfile, keyfile


@pytest.fixture
async def client(cert) -> AsyncIterator[Any]:
    certfile, keyfile = cert
    server = await start_webhook(
        {smcr.PATH: smcr.SmcrInjector(IMAGE)}, certfile, keyfile, host="127.0.0.1", port=0
    )
    trust = ssl.create_default_context(cafile=str(certfile))
    async with aiohttp.ClientSession(f"https://127.0.0.1:{server.port}") as session:

        async def post(body: Any, path: str = smcr.PATH) -> tuple[int, Any]:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            async with session.post(path, data=data, ssl=trust) as reply:
                if reply.content_type == "application/json":
                    return reply.status, await reply.json()
                return reply.status, await reply.text()

        yield post
    await server.stop()


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
async def test_annotated_erdma_pod_gets_the_smcr_init_container(client, value):
    status, body = await client(review(pod(value)))

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


async def test_injected_container_runs_after_the_users_init_containers(client):
    obj = pod(init_containers=[{"name": "fetch", "image": "busybox"}])
    _status, body = await client(review(obj))
    names = [c["name"] for c in apply_patch(obj, body["response"])["spec"]["initContainers"]]
    assert names == ["fetch", "smcr-init"]


async def test_already_injected_pod_is_not_patched_twice(client):
    obj = pod(init_containers=[{"name": "smcr-init", "image": IMAGE}])
    _status, body = await client(review(obj))
    assert "patch" not in body["response"]


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
async def test_pods_that_do_not_qualify_are_admitted_untouched(client, obj):
    status, body = await client(review(obj))
    assert status == 200
    assert body["response"]["allowed"] is True
    assert "patch" not in body["response"]


async def test_host_network_pod_with_garbage_value_is_not_judged(client):
    _status, body = await client(review(pod(annotation="yes", host_network=True)))
    assert body["response"]["allowed"] is True
    assert "patch" not in body["response"]


@pytest.mark.parametrize("value", ["yes", "enabled", "tRUE", ""])
async def test_garbage_value_is_refused_naming_value_and_choices(client, value):
    _status, body = await client(review(pod(annotation=value)))
    response = body["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert (
        f"invalid value {value!r} for annotation {SMCR_ANNOTATION}" in response["status"]["message"]
    )
    assert "1, t, T, TRUE, true, True" in response["status"]["message"]


async def test_updates_are_not_mutated(client):
    _status, body = await client(review(pod(), operation="UPDATE"))
    assert body["response"] == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (b"{not json", "body is not JSON"),
        ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}, "expected"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request must be"),
    ],
)
async def test_malformed_reviews_get_400_with_the_reason(client, body, complaint):
    status, reply = await client(body)
    assert status == 400
    assert complaint in reply["error"]


async def test_unknown_path_is_404(client):
    status, _reply = await client(review(pod()), path="/validate-unknown")
    assert status == 404


def test_unreadable_certificate_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"cannot load TLS certificate .*missing\.crt"):
        tls_context(tmp_path / "missing.crt", tmp_path / "missing.key")
