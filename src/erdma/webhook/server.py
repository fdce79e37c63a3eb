"""The HTTPS server: one POST route per webhook path, plus GET /healthz for probes.

Adding a webhook (e.g. a validating handler for `rdma/hca`) is one more entry in the routes
mapping; the server, TLS and the AdmissionReview wire format stay here and in `review`.
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from erdma.webhook.review import (
    Handler,
    ObjectError,
    ReviewError,
    Verdict,
    parse_review,
    review_response,
)

log = logging.getLogger(__name__)

#: The largest AdmissionReview body served (8 MiB); a larger one is answered 413.
#:
#: aiohttp's default (1 MiB) is below what the API server sends for ordinary large pods, and
#: with ``failurePolicy: Ignore`` a 413 means the pod skips the webhook's rules. The API server
#: accepts write bodies up to 3 MiB (its ``MaxRequestBodyBytes``), etcd stores values up to
#: 1.5 MiB (``--max-request-bytes``), and an UPDATE's review carries ``object`` and
#: ``oldObject`` together, re-encoded as JSON (bigger than the protobuf a client may have sent),
#: plus the envelope (``userInfo``, ``options``). Two 3 MiB objects are 6 MiB; 8 MiB leaves the
#: envelope and re-encoding room while still bounding what one request can make us hold.
MAX_REVIEW_BYTES = 8 * 1024 * 1024


def make_app(routes: Mapping[str, Handler]) -> web.Application:
    """An aiohttp application serving each handler at its path.

    A body over `MAX_REVIEW_BYTES` is answered 413 and one that is not an AdmissionReview 400,
    each with ``{"error": reason}``; neither reaches the handler. A review whose object the
    handler finds ill-typed (`ObjectError`) is answered with a review denying it, status code
    400, naming the field.
    """
    app = web.Application(client_max_size=MAX_REVIEW_BYTES)

    def endpoint(path: str, handler: Handler) -> web.RouteDef:
        async def serve(request: web.Request) -> web.Response:
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                size = request.content_length
                log.warning(
                    "admission %s: %s refused, over the %d byte limit",
                    path,
                    "a streamed body" if size is None else f"a body of {size} bytes",
                    MAX_REVIEW_BYTES,
                )
                reason = (
                    f"AdmissionReview body is larger than the {MAX_REVIEW_BYTES} bytes "
                    "(8 MiB) this webhook serves"
                )
                return web.json_response({"error": reason}, status=413)
            try:
                review = parse_review(body)
            except ReviewError as exc:
                log.warning("admission %s: bad request: %s", path, exc)
                return web.json_response({"error": str(exc)}, status=400)
            try:
                verdict = handler(review)
            except ObjectError as exc:
                log.warning("admission %s uid=%.80s: %s", path, review.uid, exc)
                verdict = Verdict(allowed=False, message=str(exc), code=400)
            log.info(
                "admission %s %.40s uid=%.80s allowed=%s patch_ops=%d",
                path,
                review.operation,
                review.uid,
                verdict.allowed,
                len(verdict.patch),
            )
            return web.json_response(review_response(review.uid, verdict))

        return web.post(path, serve)

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.add_routes([endpoint(p, h) for p, h in routes.items()] + [web.get("/healthz", healthz)])
    return app


def tls_context(certfile: Path, keyfile: Path) -> ssl.SSLContext:
    """A server TLS context; a missing or mismatched file is named in the error."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    _load(context, certfile, keyfile)
    return context


def _load(context: ssl.SSLContext, certfile: Path, keyfile: Path) -> None:
    try:
        context.load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(
            f"cannot load TLS certificate {certfile} with key {keyfile}: {exc}"
        ) from exc


@dataclass
class WebhookServer:
    """A running webhook server; `port` is the bound port (useful when asked for port 0)."""

    runner: web.AppRunner
    port: int
    context: ssl.SSLContext
    certfile: Path
    keyfile: Path

    def reload_certificate(self) -> None:
        """Serve the certificate files as they are now, without a restart.

        The listening socket keeps this one context and each new connection copies the
        certificate from it, so loading into it switches new handshakes over while open
        connections finish with the old one. The pair is first loaded into a scratch context:
        a broken pair raises ValueError and leaves the served certificate as it was, where a
        failed load into the live context could leave it with a certificate and a key that do
        not belong together.
        """
        tls_context(self.certfile, self.keyfile)
        _load(self.context, self.certfile, self.keyfile)

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_webhook(
    routes: Mapping[str, Handler],
    certfile: Path,
    keyfile: Path,
    host: str = "0.0.0.0",
    port: int = 9443,
) -> WebhookServer:
    """Serve `routes` over HTTPS until `stop()`; `reload_certificate()` picks up new files."""
    context = tls_context(certfile, keyfile)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family)
    runner = web.AppRunner(make_app(routes), access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock, ssl_context=context).start()
    bound = sock.getsockname()[1]
    log.info("webhook serving %s on %s:%d", ", ".join(routes), host, bound)
    return WebhookServer(runner, bound, context, certfile, keyfile)
