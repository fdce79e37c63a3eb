"""An HTTPS proxy in front of the real test API server that answers chosen requests itself.

`CuttableProxy` breaks the connection; this one breaks the conversation: a watch answered 410
Gone or 403, a stream that carries ``ERROR 410 Expired``, a 429 with ``Retry-After``, a 503, or
every request made slow. Everything it does not answer itself goes to kube-testserver as the
admin user and streams back unchanged, so clients see the real server otherwise.

It serves on a loop in a thread of its own (kopf cancels every task of its loop when its
operator stops, and would take the proxy's handlers with it), with a throwaway certificate:
its kubeconfig skips verification of the proxy, which is this file's only shortcut.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from erdma.controller import certs
from erdma.controller.serving import ServingLoop
from tests.fakes.kubeapi import KubeApiServer
from tests.fakes.ports import free_port

#: headers that belong to one hop, not to the message
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "upgrade"}

Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Rule:
    """Requests the proxy answers itself: those ``matches`` accepts, ``times`` of them (or all
    until removed), each with ``answer``."""

    matches: Callable[[web.Request], bool]
    answer: Answer
    times: int | None = None
    hits: int = 0


@dataclass(frozen=True)
class Seen:
    """One request the proxy received, and the status it answered."""

    at: float
    method: str
    path: str
    watch: bool
    status: int


def watch_of(path: str) -> Callable[[web.Request], bool]:
    """Matches watch requests on ``path`` (e.g. ``/api/v1/nodes``)."""
    return lambda r: r.method == "GET" and r.path == path and r.query.get("watch") == "true"


def status_answer(code: int, reason: str, headers: dict[str, str] | None = None) -> Answer:
    """An API-server style ``Status`` error with ``code``."""

    async def answer(_: web.Request) -> web.StreamResponse:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": reason,
            "message": f"injected by the test proxy: {reason}",
            "code": code,
        }
        # the server's own Content-Type, without a charset: lightkube reads only that as a Status
        content = {"Content-Type": "application/json", **(headers or {})}
        return web.Response(status=code, body=json.dumps(body).encode(), headers=content)

    return answer


def text_answer(code: int, text: str, headers: dict[str, str] | None = None) -> Answer:
    """A plain-text error, as a load balancer or proxy in front of the API server sends."""

    async def answer(_: web.Request) -> web.StreamResponse:
        return web.Response(status=code, text=text, headers=headers)

    return answer


async def expired_watch(request: web.Request) -> web.StreamResponse:
    """A watch that is accepted and at once carries ``ERROR 410 Expired``, as a server does
    for a resourceVersion it no longer has."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    event = {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": "Expired",
            "message": "too old resource version",
            "code": 410,
        },
    }
    await response.write(json.dumps(event).encode() + b"\n")
    await response.write_eof()
    return response


@dataclass
class ApiFaultProxy:
    """Start with ``async with``; ``kubeconfig`` points a client at it."""

    kube_api: KubeApiServer
    #: seconds every request waits before it is forwarded or answered (a slow API server)
    delay: float = 0.0
    rules: list[Rule] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    port: int = 0
    _loop: ServingLoop | None = None
    _runner: web.AppRunner | None = None
    _session: aiohttp.ClientSession | None = None
    _streams: set[aiohttp.ClientResponse] = field(default_factory=set)
    _dir: tempfile.TemporaryDirectory[str] = field(default_factory=tempfile.TemporaryDirectory)

    async def __aenter__(self) -> ApiFaultProxy:
        self._loop = ServingLoop("api-fault-proxy")
        self.port = free_port()
        await self._loop.run(self._start())
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._loop is not None
        await self._loop.run(self._stop())
        await self._loop.close()
        self._dir.cleanup()

    def kubeconfig(self) -> Path:
        """The test server's kubeconfig, pointed at the proxy."""
        conf: dict[str, Any] = yaml.safe_load(self.kube_api.kubeconfig.read_text())
        for cluster in conf["clusters"]:
            cluster["cluster"] = {
                "server": f"https://127.0.0.1:{self.port}",
                "insecure-skip-tls-verify": True,
            }
        path = Path(self._dir.name) / "kubeconfig"
        path.write_text(yaml.safe_dump(conf))
        return path

    def add(self, rule: Rule) -> Rule:
        self.rules.append(rule)
        return rule

    def clear(self) -> None:
        self.rules.clear()

    async def end_watches(self) -> None:
        """End every open forwarded stream, so its clients watch again (through the rules)."""
        assert self._loop is not None
        await self._loop.run(self._end_streams())

    def watching(self, path: str) -> bool:
        """Whether a watch of ``path`` is open through the proxy now (so `end_watches` ends
        it); a watch is recorded in `seen` only when it ends."""
        return any(upstream.url.path == path for upstream in list(self._streams))

    def requests(self, path: str, *, watch: bool) -> list[Seen]:
        return [s for s in list(self.seen) if s.path == path and s.watch == watch]

    async def _end_streams(self) -> None:
        for upstream in list(self._streams):
            upstream.close()

    async def _start(self) -> None:
        upstream = ssl.create_default_context()
        conf = yaml.safe_load(self.kube_api.kubeconfig.read_text())
        upstream.load_verify_locations(conf["clusters"][0]["cluster"]["certificate-authority"])
        user = conf["users"][0]["user"]
        upstream.load_cert_chain(user["client-certificate"], user["client-key"])
        self._session = aiohttp.ClientSession(
            base_url=self.kube_api.url,
            connector=aiohttp.TCPConnector(ssl=upstream),
            timeout=aiohttp.ClientTimeout(total=None),
            auto_decompress=False,
        )
        bundle = certs.generate("api-fault-proxy", "test")
        crt, key = Path(self._dir.name) / "tls.crt", Path(self._dir.name) / "tls.key"
        crt.write_bytes(bundle.tls_crt)
        key.write_bytes(bundle.tls_key)
        serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving.load_cert_chain(crt, key)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=serving).start()

    async def _stop(self) -> None:
        await self._end_streams()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def _rule_for(self, request: web.Request) -> Rule | None:
        for rule in list(self.rules):
            if rule.matches(request) and (rule.times is None or rule.hits < rule.times):
                rule.hits += 1
                return rule
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self.delay:
            await asyncio.sleep(self.delay)
        rule = self._rule_for(request)
        response = await (rule.answer(request) if rule else self._forward(request))
        watch = request.query.get("watch") == "true"
        seen = Seen(time.monotonic(), request.method, request.path, watch, response.status)
        self.seen.append(seen)
        return response

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        headers.pop("Host", None)
        body = await request.read()
        async with self._session.request(
            request.method, request.rel_url, headers=headers, data=body or None
        ) as upstream:
            response = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS},
            )
            await response.prepare(request)
            self._streams.add(upstream)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            except (ConnectionResetError, aiohttp.ClientError):
                pass  # the upstream stream was ended by end_watches(), or the client left
            finally:
                self._streams.discard(upstream)
            with contextlib.suppress(ConnectionResetError):
                await response.write_eof()
        return response
