"""The webhook server over real HTTPS, reached the way the API server reaches it.

`serving(routes, folder)` starts `start_webhook` on 127.0.0.1 with the controller's own
certificates (a fresh CA and a server certificate for the Service name, written to ``folder``)
and yields ``post(body, path)``, which sends a body (a dict, or raw bytes) and returns the status
with the JSON (or text) reply. The client trusts the server through ``ca.crt`` alone and asks
for ``<service>.<namespace>.svc``, as the API server does. Used by the webhook tests (through
``webhook_support``) and by the admission fault scenarios.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from erdma.controller import certs, webhook_certs
from erdma.webhook.review import Handler
from erdma.webhook.server import start_webhook

SERVICE = "erdma-webhook"
NAMESPACE = "erdma-test"
#: the name the client asks for, as the API server does: ``<service>.<namespace>.svc``
SERVER_NAME = f"{SERVICE}.{NAMESPACE}.svc"

Post = Callable[..., Awaitable[tuple[int, Any]]]


def write_cert(folder: Path) -> dict[str, Path]:
    """``tls.crt``, ``tls.key`` and ``ca.crt`` written by the controller's certificate code."""
    return webhook_certs.write_files(certs.generate(SERVICE, NAMESPACE), folder)


@asynccontextmanager
async def serving(
    routes: Mapping[str, Handler], cert: dict[str, Path], default_path: str = "/"
) -> AsyncIterator[Post]:
    """``post(body, path=default_path)`` against a real server serving ``routes``."""
    server = await start_webhook(routes, cert["tls.crt"], cert["tls.key"], "127.0.0.1", 0)
    trust = ssl.create_default_context(cafile=str(cert["ca.crt"]))
    try:
        async with aiohttp.ClientSession(f"https://127.0.0.1:{server.port}") as session:

            async def post(body: Any, path: str = default_path) -> tuple[int, Any]:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                async with session.post(
                    path, data=data, ssl=trust, server_hostname=SERVER_NAME
                ) as reply:
                    if reply.content_type == "application/json":
                        return reply.status, await reply.json()
                    return reply.status, await reply.text()

            yield post
    finally:
        await server.stop()
