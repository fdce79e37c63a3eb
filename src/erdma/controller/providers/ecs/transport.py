"""One HTTP session, and one SSL context, per ECS SDK client instead of one per call.

Every ``*_async`` call of the SDK ends in ``darabonba.core.DaraCore.async_do_action``, which
opens a new ``aiohttp.ClientSession`` for the request and closes it after: a new TCP connection
and TLS handshake per ECS call, and for HTTPS a new SSL context that loads certifi's CA bundle.
``python -m bench.bench_ecs_transport`` measured 38-47 ms of the controller's CPU per HTTPS call
that way, 0.2-0.5 ms with the session shared (docs/benchmarks.md). Neither ``Config`` nor
``RuntimeOptions`` takes a session or connector, so ``shared_session_client`` makes a subclass
of the SDK client whose calls send through the client's own ``SharedSession`` (kept-alive
connections, one SSL context), closed by ``aclose``.

How it hooks in: the client's ``call_api_async`` (which every action's ``*_async`` method
calls) names its ``SharedSession`` in a context variable, and ``alibabacloud_tea_openapi``'s
client module is given a ``DaraCore`` whose ``async_do_action`` sends through the session
named there. Calls of any other client find no session named and run the SDK's own code.

``SharedSession.send`` does what ``async_do_action`` does (same URL, timeouts, proxy, CA and
``ignoreSSL`` handling, same ``DaraResponse``, an ``IOError`` raised as ``RetryError``), reusing
the SDK's helpers; only the session outlives the call. The session is made for the TLS settings
and event loop of the first call; a call with other settings, from another loop, or after
``close`` takes the SDK's own per-call path.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import ssl
from dataclasses import dataclass
from enum import Enum
from typing import Any

import aiohttp
import alibabacloud_tea_openapi.client as openapi_client  # type: ignore[import-untyped]
import certifi
from darabonba.core import (  # type: ignore[import-untyped]
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    DaraCore,
)
from darabonba.exceptions import RetryError  # type: ignore[import-untyped]
from darabonba.request import DaraRequest  # type: ignore[import-untyped]
from darabonba.response import DaraResponse  # type: ignore[import-untyped]
from darabonba.utils.stream import BaseStream  # type: ignore[import-untyped]

log = logging.getLogger(__name__)

#: the session of the client whose call is running in this task, if it shares one
_SENDING_THROUGH: contextvars.ContextVar[SharedSession | None] = contextvars.ContextVar(
    "ecs_shared_session", default=None
)


@dataclass(frozen=True)
class _Tls:
    """What the SDK builds a call's connector from, read from that call's runtime options."""

    verify: bool | str  # False: no verification; True: certifi's bundle; str: a CA file
    cert: Any
    tls_min_version: str | None
    pool_size: int

    @classmethod
    def of(cls, request: DaraRequest, runtime: dict[str, Any]) -> _Tls:
        https = request.protocol.upper() == "HTTPS"
        verify: bool | str = https and not runtime.get("ignoreSSL", False)
        if verify and runtime.get("ca") is not None:
            verify = runtime["ca"]
        tls_min_version = runtime.get("tlsMinVersion")
        if isinstance(tls_min_version, Enum):
            tls_min_version = tls_min_version.value
        pool_size = DaraCore._resolve_pool_maxsize(runtime)
        return cls(verify, runtime.get("cert"), tls_min_version, pool_size)

    def ssl_context(self) -> ssl.SSLContext | None:
        """The context the SDK would build for a call (None: plain HTTP or ``ignoreSSL``)."""
        if self.verify is False:
            return None
        context = ssl.create_default_context()
        DaraCore._set_tls_minimum_version(context, self.tls_min_version)
        context.load_verify_locations(
            self.verify if isinstance(self.verify, str) else certifi.where()
        )
        if self.cert is not None:
            certfile, keyfile = (
                (self.cert[0], self.cert[1] if len(self.cert) > 1 else None)
                if isinstance(self.cert, (list, tuple))
                else (self.cert, None)
            )
            context.load_cert_chain(certfile=certfile, keyfile=keyfile)
        return context


def _timeout(runtime: dict[str, Any]) -> aiohttp.ClientTimeout:
    """The SDK's per-call timeouts: connect and read, in ms, defaulting to ``timeout``."""
    timeout = runtime.get("timeout")
    connect = runtime.get("connectTimeout") or timeout or DEFAULT_CONNECT_TIMEOUT
    read = runtime.get("readTimeout") or timeout or DEFAULT_READ_TIMEOUT
    return aiohttp.ClientTimeout(sock_read=int(read) / 1000, sock_connect=int(connect) / 1000)


def _proxy(request: DaraRequest, runtime: dict[str, Any]) -> str | None:
    """The SDK's proxy for the call's protocol: the runtime option, else the environment."""
    protocol = request.protocol.upper()
    if protocol == "HTTP":
        return (
            runtime.get("httpProxy") or os.environ.get("HTTP_PROXY") or os.environ.get("http_proxy")
        )
    if protocol == "HTTPS":
        return (
            runtime.get("httpsProxy")
            or os.environ.get("HTTPS_PROXY")
            or os.environ.get("https_proxy")
        )
    return None


def _body(request: DaraRequest) -> bytes:
    if isinstance(request.body, BaseStream):
        return b"".join(request.body)
    if isinstance(request.body, str):
        return request.body.encode("utf-8")
    return request.body or b""


class SharedSession:
    """One SDK client's HTTP session, made on its first call and kept until ``close``, or until
    the loop it was made on ends: an owner that never calls ``close`` (a test, a script) would
    otherwise leave it to the garbage collector, which logs "Unclosed client session" as an
    error in whatever runs then."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._tls: _Tls | None = None
        self._ssl: ssl.SSLContext | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._guard: asyncio.Task[None] | None = None

    def _session_for(self, tls: _Tls) -> aiohttp.ClientSession | None:
        """The shared session if it fits ``tls`` and the running loop (made on first use)."""
        loop = asyncio.get_running_loop()
        if self._session is None and not self._closed:
            self._ssl = tls.ssl_context()
            connector = aiohttp.TCPConnector(
                ssl=self._ssl if self._ssl is not None else True,
                limit=tls.pool_size,
                limit_per_host=tls.pool_size,
            )
            self._session = aiohttp.ClientSession(connector=connector)
            self._tls, self._loop = tls, loop
            self._guard = loop.create_task(self._close_with_loop(), name="ecs http session")
        if self._session is None or tls != self._tls or loop is not self._loop:
            return None
        return self._session

    async def send(self, request: DaraRequest, runtime: dict[str, Any]) -> DaraResponse:
        """``DaraCore.async_do_action`` over the shared session."""
        session = self._session_for(_Tls.of(request, runtime))
        if session is None:
            return await DaraCore.async_do_action(request, runtime)
        try:
            async with session.request(
                request.method,
                DaraCore.compose_url(request),
                data=_body(request),
                headers=request.headers,
                ssl=self._ssl if self._ssl is not None else False,
                proxy=_proxy(request, runtime),
                timeout=_timeout(runtime),
            ) as response:
                answer = DaraResponse()
                answer.body = await response.read()
                answer.headers = {k.lower(): v for k, v in response.headers.items()}
                answer.status_code = response.status
                answer.status_message = response.reason
                answer.response = response
                return answer
        except OSError as exc:  # as the SDK does: what its retry policy may retry
            raise RetryError(str(exc)) from exc

    async def close(self) -> None:
        """Close the session and its connections; later calls take the SDK's per-call path."""
        self._closed = True
        if self._guard is not None:
            self._guard.cancel()
        await self._close_session()

    async def _close_with_loop(self) -> None:
        """Wait for the end of the loop: ``asyncio.run`` (and pytest's loops) cancel every task
        left before closing it, and the session closes then."""
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            try:
                await self._close_session()
            except Exception:  # nothing awaits this task: asyncio would only report it unread
                log.warning("closing the ECS HTTP session as its loop ended failed", exc_info=True)

    async def _close_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


class _SharedSessionCore(DaraCore):
    """The SDK's ``DaraCore`` whose ``async_do_action`` uses the calling client's session."""

    @staticmethod
    async def async_do_action(
        request: DaraRequest, runtime_option: dict[str, Any] | None = None
    ) -> DaraResponse:
        session = _SENDING_THROUGH.get()
        if session is None:
            return await DaraCore.async_do_action(request, runtime_option)
        return await session.send(request, runtime_option or {})


def shared_session_client(client_class: Any) -> Any:
    """A subclass of the SDK client ``client_class`` whose async calls share one HTTP session
    per client (``aclose`` closes it)."""
    openapi_client.DaraCore = _SharedSessionCore

    class SharedSessionClient(client_class):
        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.http = SharedSession()

        async def call_api_async(self, params: Any, request: Any, runtime: Any) -> Any:
            token = _SENDING_THROUGH.set(self.http)
            try:
                return await super().call_api_async(params, request, runtime)
            finally:
                _SENDING_THROUGH.reset(token)

        async def aclose(self) -> None:
            """Close the client's HTTP session."""
            await self.http.close()

    return SharedSessionClient
