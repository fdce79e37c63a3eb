"""Webhook certificates against the real kube-testserver: one Secret shared by every replica."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import ssl
import stat
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TypeVar

import aiohttp
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.admissionregistration_v1 import (
    MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration,
)
from lightkube.resources.core_v1 import Namespace, Secret

from erdma.controller import certs
from erdma.controller import webhook_certs as wc
from erdma.webhook import hostnetwork
from erdma.webhook.hostnetwork import HostNetworkRdmaValidator
from erdma.webhook.server import start_webhook
from tests.integration.webhook_config_support import webhook_config
from tests.kubeapi_support import api_server_or_skip

pytest_plugins = ["tests.integration.conftest_kubeapi"]

NS = "kube-system"
W = TypeVar("W", MutatingWebhookConfiguration, ValidatingWebhookConfiguration)


@pytest.fixture
async def k8s(kube_api) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    yield client
    await client.close()


@pytest.fixture
async def settings(k8s, tmp_path: Path) -> AsyncIterator[wc.WebhookCertSettings]:
    """A unique controller name per test, so tests sharing the server never see each other."""
    name = f"erdma-{uuid.uuid4().hex[:8]}"
    yield wc.WebhookCertSettings(name=name, namespace=NS, cert_dir=tmp_path / "certs")
    with contextlib.suppress(ApiError):
        await k8s.delete(Secret, f"{name}-webhook-cert", namespace=NS)


async def stored(k8s: AsyncClient, s: wc.WebhookCertSettings) -> certs.CertBundle:
    secret = await k8s.get(Secret, s.secret_name, namespace=NS)
    return certs.CertBundle.from_secret_data(secret.data)


async def plant(k8s: AsyncClient, s: wc.WebhookCertSettings, data: dict[str, str]) -> None:
    """Create the Secret holding ``data``, as an earlier controller (or someone else) left it."""
    await k8s.create(Secret(metadata=ObjectMeta(name=s.secret_name, namespace=NS), data=data))


async def test_first_replica_creates_second_reuses(k8s, kube_api, settings, tmp_path):
    first = await wc.setup_webhook_certs(k8s, settings)
    assert first.outcome == wc.OUTCOME_CREATED
    assert await stored(k8s, settings) == first.bundle

    other_dir = tmp_path / "replica-2"
    second_client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    try:
        second = await wc.setup_webhook_certs(
            second_client, wc.WebhookCertSettings(settings.name, NS, other_dir)
        )
    finally:
        await second_client.close()
    assert second.outcome == wc.OUTCOME_REUSED
    assert second.bundle == first.bundle
    for key in certs.SECRET_KEYS:
        assert (other_dir / key).read_bytes() == (settings.cert_dir / key).read_bytes()


@pytest.mark.parametrize("replicas", [2, 4])
async def test_concurrent_replicas_end_with_one_secret(kube_api, settings, tmp_path, replicas):
    """Every replica starts at once; connections are warmed so their reads overlap the creates.

    Exactly one creates; the others read the winner's (after 409 AlreadyExists, or because
    their first read already saw it: which one depends on timing and both are correct).
    """
    clients = [AsyncClient(KubeConfig.from_file(kube_api.kubeconfig)) for _ in range(replicas)]
    dirs = [tmp_path / f"replica-{i}" for i in range(replicas)]
    try:
        for c in clients:
            await c.get(Namespace, NS)
        results = await asyncio.gather(
            *(
                wc.setup_webhook_certs(c, wc.WebhookCertSettings(settings.name, NS, d))
                for c, d in zip(clients, dirs, strict=True)
            )
        )
        listed = [s async for s in clients[0].list(Secret, namespace=NS)]
    finally:
        for c in clients:
            await c.close()
    outcomes = [r.outcome for r in results]
    assert outcomes.count(wc.OUTCOME_CREATED) == 1, outcomes
    assert set(outcomes) <= {wc.OUTCOME_CREATED, wc.OUTCOME_LOST_RACE, wc.OUTCOME_REUSED}
    assert all(r.bundle == results[0].bundle for r in results)
    for key in certs.SECRET_KEYS:
        assert len({(d / key).read_bytes() for d in dirs}) == 1
    ours = [s for s in listed if s.metadata and s.metadata.name == settings.secret_name]
    assert len(ours) == 1
    assert certs.CertBundle.from_secret_data(ours[0].data) == results[0].bundle


async def test_the_charts_empty_secret_is_filled_in_place_and_then_reused(k8s, settings, tmp_path):
    """The chart creates the Secret empty (kubernetes.io/tls requires both keys): the controller
    fills that object with an update, keeping its type and identity, as its RBAC allows."""
    placeholder = Secret(
        metadata=ObjectMeta(name=settings.secret_name, namespace=NS),
        type="kubernetes.io/tls",
        data={"tls.crt": "", "tls.key": ""},
    )
    made = await k8s.create(placeholder)
    first = await wc.setup_webhook_certs(k8s, settings)
    assert (first.outcome, first.reason) == (wc.OUTCOME_FILLED, "")
    secret = await k8s.get(Secret, settings.secret_name, namespace=NS)
    assert secret.type == "kubernetes.io/tls" and secret.metadata and made.metadata
    assert secret.metadata.uid == made.metadata.uid
    assert certs.CertBundle.from_secret_data(secret.data) == first.bundle
    other = wc.WebhookCertSettings(settings.name, NS, tmp_path / "replica-2")
    second = await wc.setup_webhook_certs(k8s, other)
    assert (second.outcome, second.bundle) == (wc.OUTCOME_REUSED, first.bundle)


async def test_expiring_certificate_is_rotated_and_old_ca_kept(k8s, settings):
    old = certs.generate(settings.name, NS, validity=datetime.timedelta(days=10))
    await plant(k8s, settings, old.secret_data())
    result = await wc.setup_webhook_certs(k8s, settings)
    assert result.outcome == wc.OUTCOME_ROTATED
    assert "within the 30-day renewal margin" in result.reason
    new_cert = result.bundle.certificate()
    left = new_cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    assert left > datetime.timedelta(days=3600)
    assert result.bundle.tls_key != old.tls_key
    # the old CA is still trusted, so a replica serving the old certificate keeps working
    cas = result.bundle.cas()
    assert len(cas) == 2 and cas[1] == old.cas()[0]
    assert await stored(k8s, settings) == result.bundle
    again = await wc.setup_webhook_certs(k8s, settings)
    assert again.outcome == wc.OUTCOME_REUSED and again.bundle == result.bundle


async def test_two_replicas_rotating_at_once_agree(kube_api, settings, tmp_path):
    old = certs.generate(settings.name, NS, validity=datetime.timedelta(days=1))
    clients = [AsyncClient(KubeConfig.from_file(kube_api.kubeconfig)) for _ in range(2)]
    try:
        await plant(clients[0], settings, old.secret_data())
        results = await asyncio.gather(
            *(
                wc.setup_webhook_certs(c, wc.WebhookCertSettings(settings.name, NS, tmp_path / d))
                for c, d in zip(clients, "ab", strict=True)
            )
        )
    finally:
        for c in clients:
            await c.close()
    assert results[0].bundle == results[1].bundle
    assert wc.OUTCOME_ROTATED in {r.outcome for r in results}


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda b: {**b, "tls.key": ""}, "tls.key missing or empty"),
        (lambda b: {**b, "tls.crt": base64.b64encode(b"junk").decode()}, "not valid PEM"),
    ],
    ids=["no-key", "garbage-cert"],
)
async def test_damaged_secret_is_replaced(k8s, settings, damage, reason):
    data = damage(certs.generate(settings.name, NS).secret_data())
    await plant(k8s, settings, data)
    result = await wc.setup_webhook_certs(k8s, settings)
    assert result.outcome == wc.OUTCOME_ROTATED
    assert reason in result.reason.replace("key(s) ", "")
    assert certs.problem(result.bundle, settings.dns_names(), certs.RENEW_BEFORE) is None


async def test_certificate_for_another_service_is_replaced(k8s, settings):
    foreign = certs.generate("someone-else", NS)
    await plant(k8s, settings, foreign.secret_data())
    result = await wc.setup_webhook_certs(k8s, settings)
    assert result.outcome == wc.OUTCOME_ROTATED
    assert f"does not cover {settings.name}," in result.reason


async def test_files_sans_and_key_mode(k8s, settings):
    settings = wc.WebhookCertSettings(
        settings.name, NS, settings.cert_dir, service="erdma-webhook", cluster_domain="corp.local"
    )
    result = await wc.setup_webhook_certs(k8s, settings)
    assert set(result.files) == {"tls.crt", "tls.key", "ca.crt"}
    for key, path in result.files.items():
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o600 if key == "tls.key" else 0o644), (key, oct(mode))
    assert not [p for p in settings.cert_dir.iterdir() if p.name.startswith(".")]
    cert = x509.load_pem_x509_certificate((settings.cert_dir / "tls.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "erdma-webhook",
        "erdma-webhook.kube-system",
        "erdma-webhook.kube-system.svc",
        "erdma-webhook.kube-system.svc.corp.local",
    ]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    ca = x509.load_pem_x509_certificate((settings.cert_dir / "ca.crt").read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    cert.verify_directly_issued_by(ca)


async def test_webhook_server_serves_the_certificate_to_a_client_trusting_ca(k8s, settings):
    """What the API server does: trust only caBundle, connect by the service DNS name."""
    result = await wc.setup_webhook_certs(k8s, settings)
    server = await start_webhook(
        {hostnetwork.PATH: HostNetworkRdmaValidator()},
        result.files["tls.crt"],
        result.files["tls.key"],
        host="127.0.0.1",
        port=0,
    )
    trust = ssl.create_default_context(cadata=result.bundle.ca_crt.decode())
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "operation": "CREATE", "object": {"spec": {}}},
    }
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"https://127.0.0.1:{server.port}{hostnetwork.PATH}",
                data=json.dumps(body),
                ssl=trust,
                server_hostname=f"{settings.name}.{NS}.svc",
            ) as reply:
                assert reply.status == 200
                assert (await reply.json())["response"] == {"uid": "u1", "allowed": True}
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await session.get(
                    f"https://127.0.0.1:{server.port}/healthz",
                    ssl=trust,
                    server_hostname="not-the-service.example",
                )
    finally:
        await server.stop()


async def test_ca_bundle_patch_reports_absent_configurations(k8s, settings, caplog):
    """The API server serves admissionregistration but the chart's configurations are not there
    yet: each is named as not found, startup carries on, and later rounds keep asking."""
    caplog.set_level("INFO", logger=wc.__name__)
    result = await wc.setup_webhook_certs(k8s, settings)
    assert [(s.kind, s.state) for s in result.ca_bundle] == [
        ("MutatingWebhookConfiguration", wc.CA_NOT_FOUND),
        ("ValidatingWebhookConfiguration", wc.CA_NOT_FOUND),
    ]
    assert str(result.ca_bundle[0]) == (
        f"MutatingWebhookConfiguration {settings.name!r}: "
        "not found; caBundle not set (it is set once the object exists)"
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [str(s) for s in result.ca_bundle]
    assert (settings.cert_dir / "tls.crt").is_file()  # the files are there to serve
    keeper = wc.CaBundleKeeper(k8s, settings.name, result.ca_bundle)
    assert keeper.kinds == list(wc.WEBHOOK_KINDS)


async def test_unwritable_cert_dir_is_named(k8s, settings, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    bad = wc.WebhookCertSettings(settings.name, NS, blocker / "certs")
    with pytest.raises(wc.WebhookCertError, match=r"certDir .*/file/certs.*writable directory"):
        await wc.setup_webhook_certs(k8s, bad)


async def test_api_refusal_is_named(k8s, settings):
    bad = wc.WebhookCertSettings(settings.name, "Not_A_Namespace", settings.cert_dir)
    with pytest.raises(
        wc.WebhookCertError, match=r"cannot create Secret Not_A_Namespace/.*invalid"
    ):
        await wc.setup_webhook_certs(k8s, bad)


# --- caBundle patching where the kinds exist -------------------------------------------------
async def test_ca_bundle_set_where_it_differs_and_left_alone_after(kube_api, settings):
    client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    try:
        await client.create(
            webhook_config(
                MutatingWebhookConfiguration,
                settings.name,
                [("smcr.erdma.alibabacloud.com", None), ("other.example.com", "c3RhbGU=")],
            )
        )
        result = await wc.setup_webhook_certs(client, settings)
        mutating, validating = result.ca_bundle
        assert (mutating.state, mutating.detail) == (wc.CA_PATCHED, "2 webhook(s)")
        assert validating.state == wc.CA_NOT_FOUND
        assert str(validating) == (
            f"ValidatingWebhookConfiguration {settings.name!r}: not found; caBundle not set "
            "(it is set once the object exists)"
        )
        got = await client.get(MutatingWebhookConfiguration, settings.name)
        wanted = base64.b64encode(result.bundle.ca_crt).decode()
        assert [h.clientConfig.caBundle for h in got.webhooks or []] == [wanted, wanted]

        again = await wc.setup_webhook_certs(client, settings)
        assert again.ca_bundle[0].state == wc.CA_UP_TO_DATE
        after = await client.get(MutatingWebhookConfiguration, settings.name)
        assert after.metadata and got.metadata
        assert after.metadata.resourceVersion == got.metadata.resourceVersion  # no write
    finally:
        await client.close()


async def test_configuration_created_later_gets_the_ca_bundle(kube_api, settings, caplog):
    caplog.set_level("INFO", logger=wc.__name__)
    client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    try:
        result = await wc.setup_webhook_certs(client, settings)
        assert {s.state for s in result.ca_bundle} == {wc.CA_NOT_FOUND}
        keeper = wc.CaBundleKeeper(client, settings.name, result.ca_bundle)
        await client.create(
            webhook_config(
                ValidatingWebhookConfiguration,
                settings.name,
                [("rdma-hca.erdma.alibabacloud.com", "")],
            )
        )
        await keeper.check(result.bundle.ca_crt)  # the next maintenance round
        await keeper.check(result.bundle.ca_crt)  # and one more: nothing left to change
        wanted = base64.b64encode(result.bundle.ca_crt).decode()
        got = await client.get(ValidatingWebhookConfiguration, settings.name)
        assert got.webhooks and got.webhooks[0].clientConfig.caBundle == wanted
    finally:
        await client.close()
    patched = [r.getMessage() for r in caplog.records if "caBundle set" in r.getMessage()]
    assert patched == [
        f"ValidatingWebhookConfiguration {settings.name!r}: caBundle set: 1 webhook(s)"
    ]


async def test_kinds_a_cluster_does_not_serve_are_named_and_no_longer_asked_for(settings, caplog):
    """A cluster with admissionregistration.k8s.io switched off (as kube-apiserver's
    --runtime-config does): both kinds are reported as not served, startup carries on, and the
    maintenance rounds stop asking for them."""
    caplog.set_level("INFO", logger=wc.__name__)
    server = api_server_or_skip(args=["--runtime-config=admissionregistration.k8s.io/v1=false"])
    with server:
        client = AsyncClient(KubeConfig.from_file(server.kubeconfig))
        try:
            result = await wc.setup_webhook_certs(client, settings)
            keeper = wc.CaBundleKeeper(client, settings.name, result.ca_bundle)
        finally:
            await client.close()
    assert keeper.kinds == []
    assert {s.kind: s.state for s in result.ca_bundle} == dict.fromkeys(
        (k.__name__ for k in wc.WEBHOOK_KINDS), wc.CA_NOT_SERVED
    )
    assert str(result.ca_bundle[1]) == (
        f"ValidatingWebhookConfiguration {settings.name!r}: "
        "not found: this API server does not serve ValidatingWebhookConfiguration"
    )
