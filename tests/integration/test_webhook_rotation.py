"""The running webhook server follows the certificate Secret without a restart.

Against the real kube-testserver: the maintenance loop of ``erdma.controller.webhooks`` runs with
short intervals, and each test looks at what a fresh TLS handshake presents.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime
import hashlib
import ssl
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.admissionregistration_v1 import ValidatingWebhookConfiguration
from lightkube.resources.core_v1 import Secret
from lightkube.types import PatchType

from erdma.controller import certs
from erdma.controller import webhook_certs as wc
from erdma.controller.webhooks import maintain_webhooks
from erdma.webhook import hostnetwork
from erdma.webhook.hostnetwork import HostNetworkRdmaValidator
from erdma.webhook.server import WebhookServer, start_webhook
from tests.integration.webhook_config_support import webhook_config

pytest_plugins = ["tests.integration.conftest_kubeapi"]

NS = "kube-system"
HOUR = 3600.0


@pytest.fixture
async def k8s(kube_api) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    yield client
    await client.close()


@pytest.fixture
async def settings(k8s, tmp_path: Path) -> AsyncIterator[wc.WebhookCertSettings]:
    name = f"erdma-{uuid.uuid4().hex[:8]}"
    yield wc.WebhookCertSettings(name=name, namespace=NS, cert_dir=tmp_path / "certs")
    with contextlib.suppress(ApiError):
        await k8s.delete(Secret, f"{name}-webhook-cert", namespace=NS)


async def serve(result: wc.CertResult) -> WebhookServer:
    return await start_webhook(
        {hostnetwork.PATH: HostNetworkRdmaValidator()},
        result.files["tls.crt"],
        result.files["tls.key"],
        host="127.0.0.1",
        port=0,
    )


def fingerprint(pem_or_der: bytes) -> str:
    der = ssl.PEM_cert_to_DER_cert(pem_or_der.decode()) if b"BEGIN" in pem_or_der else pem_or_der
    return hashlib.sha256(der).hexdigest()


def unverified() -> ssl.SSLContext:
    """A client that accepts any certificate, so the tests can look at the one presented."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


async def presented(port: int) -> str:
    """The fingerprint of the certificate a new TLS handshake gets."""
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=unverified())
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
        await writer.wait_closed()
    return fingerprint(der)


async def served_by_the_end(port: int, wanted: bytes, seconds: float = 10.0) -> str:
    """What a handshake presents once it is ``wanted``, or after ``seconds``."""
    got = ""
    for _ in range(int(seconds / 0.05)):
        got = await presented(port)
        if got == fingerprint(wanted):
            break
        await asyncio.sleep(0.05)
    return got


async def replace_secret(k8s: AsyncClient, s: wc.WebhookCertSettings, bundle: certs.CertBundle):
    """What a peer replica's rotation does to the Secret."""
    secret = await k8s.get(Secret, s.secret_name, namespace=NS)
    secret.data = bundle.secret_data()
    await k8s.replace(secret)


@contextlib.asynccontextmanager
async def maintaining(
    k8s: AsyncClient,
    s: wc.WebhookCertSettings,
    server: WebhookServer,
    first: wc.CertResult,
    check: float,
    follow: float,
) -> AsyncIterator[asyncio.Task[None]]:
    """The controller's maintenance loop, stopped (and its end awaited) on leaving."""
    stop = asyncio.Event()
    task = asyncio.create_task(maintain_webhooks(k8s, s, server, first, check, follow, stop))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def keep_alive_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """The status line of one request on an open connection (the whole reply is read)."""
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.lower().split(b"\r\n")
        if b"content-length" in line
    )
    await reader.readexactly(length)
    return head.split(b"\r\n")[0]


async def test_peer_rotation_is_served_after_one_check_without_restart(k8s, settings):
    first = await wc.setup_webhook_certs(k8s, settings)
    server = await serve(first)
    try:
        assert await presented(server.port) == fingerprint(first.bundle.tls_crt)
        old_conn = await asyncio.open_connection("127.0.0.1", server.port, ssl=unverified())
        assert await keep_alive_request(*old_conn) == b"HTTP/1.1 200 OK"

        peer = settings.generate(keep_cas=certs.still_valid_cas(first.bundle))
        await replace_secret(k8s, settings, peer)
        async with maintaining(k8s, settings, server, first, check=0.1, follow=HOUR):
            got = await served_by_the_end(server.port, peer.tls_crt)
        assert got == fingerprint(peer.tls_crt)
        assert (settings.cert_dir / "tls.crt").read_bytes() == peer.tls_crt
        assert (settings.cert_dir / "ca.crt").read_bytes() == peer.ca_crt
        # the connection made before the switch is still served: the server never restarted
        assert await keep_alive_request(*old_conn) == b"HTTP/1.1 200 OK"
        old_conn[1].close()
        # what the API server does: trust only the new ca.crt, dial the Service name
        trust = ssl.create_default_context(cadata=peer.ca_crt.decode())
        _, writer = await asyncio.open_connection(
            "127.0.0.1", server.port, ssl=trust, server_hostname=f"{settings.name}.{NS}.svc"
        )
        writer.close()
    finally:
        await server.stop()


async def test_certificate_entering_the_renewal_window_is_rotated_while_serving(k8s, settings):
    """Startup finds a certificate with 10 days left and a 5-day margin; by the next check the
    margin is 30 days, as if the days had passed: the check rotates it and it is served."""
    old = certs.generate(settings.name, NS, validity=datetime.timedelta(days=10))
    await k8s.create(
        Secret(metadata=ObjectMeta(name=settings.secret_name, namespace=NS), data=old.secret_data())
    )
    early = dataclasses.replace(settings, renew_before=datetime.timedelta(days=5))
    first = await wc.setup_webhook_certs(k8s, early)
    assert first.outcome == wc.OUTCOME_REUSED
    server = await serve(first)
    try:
        async with maintaining(k8s, settings, server, first, check=0.1, follow=HOUR):
            for _ in range(200):
                rotated = certs.CertBundle.from_secret_data(
                    (await k8s.get(Secret, settings.secret_name, namespace=NS)).data
                )
                if rotated != old:
                    break
                await asyncio.sleep(0.05)
            got = await served_by_the_end(server.port, rotated.tls_crt)
        assert rotated != old
        left = rotated.certificate().not_valid_after_utc - datetime.datetime.now(datetime.UTC)
        assert left > datetime.timedelta(days=3600)
        assert rotated.cas()[1] == old.cas()[0]  # the old CA is still trusted
        assert got == fingerprint(rotated.tls_crt)
    finally:
        await server.stop()


async def test_failed_round_is_logged_and_the_next_one_succeeds(k8s, settings, caplog):
    first = await wc.setup_webhook_certs(k8s, settings)
    server = await serve(first)
    blocker = settings.cert_dir / "tls.crt"
    try:
        blocker.unlink()
        blocker.mkdir()  # the new tls.crt cannot be put in place: this round fails
        peer = settings.generate()
        await replace_secret(k8s, settings, peer)
        async with maintaining(k8s, settings, server, first, check=0.1, follow=HOUR) as task:
            for _ in range(100):
                if any("not refreshed" in r.getMessage() for r in caplog.records):
                    break
                await asyncio.sleep(0.05)
            assert await presented(server.port) == fingerprint(first.bundle.tls_crt)
            blocker.rmdir()
            got = await served_by_the_end(server.port, peer.tls_crt)
            assert not task.done()
    finally:
        await server.stop()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(f"certDir {settings.cert_dir}" in w for w in warnings), warnings
    assert got == fingerprint(peer.tls_crt)


async def test_mismatched_files_keep_the_served_certificate(k8s, settings):
    first = await wc.setup_webhook_certs(k8s, settings)
    server = await serve(first)
    try:
        (settings.cert_dir / "tls.crt").write_bytes(settings.generate().tls_crt)
        with pytest.raises(ValueError, match="cannot load TLS certificate"):
            server.reload_certificate()
        assert await presented(server.port) == fingerprint(first.bundle.tls_crt)
    finally:
        await server.stop()


# --- caBundle where the configurations exist (the built-in kinds) ---------------------------


async def test_replica_follows_a_peer_rotation_and_leaves_its_ca_bundle(kube_api, tmp_path):
    """Before, a replica re-patched its own CA every minute, undoing the peer's caBundle."""
    client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    s = wc.WebhookCertSettings(f"erdma-{uuid.uuid4().hex[:8]}", NS, tmp_path / "certs")
    hook = webhook_config(ValidatingWebhookConfiguration, s.name, [("rdma.example.com", None)])
    server = None
    try:
        await client.create(hook)
        first = await wc.setup_webhook_certs(client, s)
        server = await serve(first)
        peer = s.generate(keep_cas=certs.still_valid_cas(first.bundle))
        await replace_secret(client, s, peer)
        peer_ca = base64.b64encode(peer.ca_crt).decode()
        await client.patch(
            ValidatingWebhookConfiguration,
            s.name,
            [{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": peer_ca}],
            patch_type=PatchType.JSON,
        )
        async with maintaining(client, s, server, first, check=HOUR, follow=0.1):
            got = await served_by_the_end(server.port, peer.tls_crt)
            await asyncio.sleep(0.5)  # several more rounds
        after = await client.get(ValidatingWebhookConfiguration, s.name)
        assert got == fingerprint(peer.tls_crt)
        assert [h.clientConfig.caBundle for h in after.webhooks or []] == [peer_ca]
    finally:
        if server is not None:
            await server.stop()
        await client.close()
