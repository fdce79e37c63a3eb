"""pytest plugin: the webhook server over real HTTPS, reached the way the API server reaches it.

Register it with ``pytest_plugins = ["tests.integration.webhook_support"]`` in a test module and
define two fixtures there: ``webhook_routes`` (path -> handler, as ``start_webhook`` takes them)
and ``webhook_path`` (the path ``post`` uses when none is given). ``post(body, path)`` sends an
AdmissionReview (a dict, or raw bytes) and returns the status with the JSON (or text) reply.
The certificate is the controller's own: a fresh CA and server certificate for the Service name,
trusted by the client through ``ca.crt`` alone.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from erdma.controller import certs, webhook_certs
from erdma.webhook.review import Handler
from erdma.webhook.server import start_webhook

SERVICE = "erdma-webhook"
NAMESPACE = "erdma-test"
#: the name the client asks for, as the API server does: ``<service>.<namespace>.svc``
SERVER_NAME = f"{SERVICE}.{NAMESPACE}.svc"

Post = Callable[..., Awaitable[tuple[int, Any]]]


@pytest.fixture(scope="session")
def webhook_cert(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``tls.crt``, ``tls.key`` and ``ca.crt`` written by the controller's certificate code."""
    bundle = certs.generate(SERVICE, NAMESPACE)
    return webhook_certs.write_files(bundle, tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def post(
    webhook_cert: dict[str, Path], webhook_routes: Mapping[str, Handler], webhook_path: str
) -> AsyncIterator[Post]:
    """POST to the real server on 127.0.0.1, serving ``webhook_routes``."""
    server = await start_webhook(
        webhook_routes,
        webhook_cert["tls.crt"],
        webhook_cert["tls.key"],
        host="127.0.0.1",
        port=0,
    )
    trust = ssl.create_default_context(cafile=str(webhook_cert["ca.crt"]))
    async with aiohttp.ClientSession(f"https://127.0.0.1:{server.port}") as session:

        async def send(body: Any, path: str = webhook_path) -> tuple[int, Any]:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            async with session.post(
                path, data=data, ssl=trust, server_hostname=SERVER_NAME
            ) as reply:
                if reply.content_type == "application/json":
                    return reply.status, await reply.json()
                return reply.status, await reply.text()

        yield send
    await server.stop()
