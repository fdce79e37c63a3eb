"""The ECS emulator's HTTP front: the OpenAPI endpoint and the instance metadata service.

The official SDK is pointed at it with ``endpoint="127.0.0.1:<port>"`` and
``protocol="HTTP"``, or ``"HTTPS"`` when the emulator is given a server ``tls`` context
(``tests.fakes.ecs.tls``); nothing in the client is replaced.  The same port also answers the ECS
metadata paths (IMDSv2) that the agent and the credential code read from 100.100.100.200:
at the root for one instance (``metadata_url``), and under ``/instances/<id>`` for each
instance (``metadata_url_for``), which real ECS tells apart by the caller's address and many
simulated agents on one machine cannot.

Run it inside the caller's event loop (``async with EcsEmulator() as emu``) or on its own
thread (``with EcsEmulator().in_thread() as emu``) when the caller is synchronous or wants
the server's work off its loop, as the benchmark does.
"""

from __future__ import annotations

import asyncio
import secrets
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qsl

from aiohttp import web

from erdma.aio import AsyncService
from tests.fakes.ecs.actions import ACTIONS
from tests.fakes.ecs.faults import FaultPlan
from tests.fakes.ecs.parameters import check_parameters
from tests.fakes.ecs.signature import verify_v2, verify_v3
from tests.fakes.ecs.state import EcsApiError, EcsWorld, InstanceRecord

DEFAULT_ACCESS_KEY_ID = "LTAI-emulator"
DEFAULT_ACCESS_KEY_SECRET = "emulator-secret"
TOKEN_TTL_HEADER = "X-aliyun-ecs-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aliyun-ecs-metadata-token"


class EcsEmulator(AsyncService):
    """An ECS region on 127.0.0.1: ``world`` is the state, ``faults`` the scripted trouble."""

    def __init__(
        self,
        world: EcsWorld | None = None,
        *,
        access_keys: dict[str, str] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.world = world or EcsWorld()
        self.faults = FaultPlan()
        self.access_keys = access_keys or {DEFAULT_ACCESS_KEY_ID: DEFAULT_ACCESS_KEY_SECRET}
        self.denied_actions: set[str] = set()
        self.metadata_instance_id = ""
        self.port = 0
        self.tls = tls
        #: (address, port) of each client connection the OpenAPI was called over
        self.api_connections: set[tuple[str, int]] = set()
        self._imds_tokens: dict[str, float] = {}
        self._runner: web.AppRunner | None = None

    # --- addresses -------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """``host:port`` for the SDK's ``Config.endpoint`` (with ``protocol``)."""
        return f"127.0.0.1:{self.port}"

    @property
    def protocol(self) -> str:
        """The SDK's ``protocol`` for this endpoint: HTTPS when served with ``tls``."""
        return "HTTP" if self.tls is None else "HTTPS"

    @property
    def metadata_url(self) -> str:
        """Base URL replacing ``http://100.100.100.200``."""
        return f"{self.protocol.lower()}://127.0.0.1:{self.port}"

    def metadata_url_for(self, instance_id: str) -> str:
        """Base URL of the metadata service as instance ``instance_id`` sees it."""
        return f"{self.metadata_url}/instances/{instance_id}"

    # --- life cycle ------------------------------------------------------------------------

    async def start(self, port: int = 0) -> None:
        """Listen on 127.0.0.1 (port 0 picks a free one)."""
        app = web.Application()
        app.router.add_route("*", "/", self._api)
        for prefix in ("", "/instances/{instance}"):
            app.router.add_put(f"{prefix}/latest/api/token", self._imds_token)
            app.router.add_get(f"{prefix}/latest/meta-data/{{path:.*}}", self._imds_get)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port, ssl_context=self.tls)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop listening."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @contextmanager
    def in_thread(self) -> Iterator[EcsEmulator]:
        """Serve from a private event loop on a daemon thread for the duration of the block."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self.start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop())
            loop.close()

        thread = threading.Thread(target=run, name="ecs-emulator", daemon=True)
        thread.start()
        if not ready.wait(10):
            raise RuntimeError("ECS emulator did not start within 10 s")
        try:
            yield self
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)

    # --- OpenAPI ---------------------------------------------------------------------------

    def _authenticate(self, request: web.Request, body: bytes, params: dict[str, str]) -> None:
        headers = {k.lower(): v for k, v in request.headers.items()}
        if "authorization" in headers:
            verify_v3(
                request.method, request.path, dict(request.query), headers, body, self.access_keys
            )
        else:
            verify_v2(request.method, params, self.access_keys)

    async def _api(self, request: web.Request) -> web.Response:
        if request.transport is not None:
            self.api_connections.add(request.transport.get_extra_info("peername")[:2])
        body = await request.read()
        params = dict(request.query)
        if request.content_type == "application/x-www-form-urlencoded":
            params.update(parse_qsl(body.decode(), keep_blank_values=True))
        action = request.headers.get("x-acs-action") or params.get("Action", "")
        request_id = str(uuid.uuid4()).upper()
        try:
            try:
                self._authenticate(request, body, params)
            except EcsApiError as exc:
                self.faults.calls[action] += 1
                self.faults.errors[exc.code] += 1
                raise
            handler = ACTIONS.get(action)
            if handler is None:
                raise EcsApiError(
                    "InvalidAction.NotFound", f"Specified api {action!r} is not found.", 404
                )
            check_parameters(action, params)
            admission = self.faults.admit(action, params)
            if admission.delay > 0:
                await asyncio.sleep(admission.delay)
            if admission.error is not None:
                raise admission.error
            if action in self.denied_actions:
                raise EcsApiError(
                    "Forbidden.RAM",
                    "User not authorized to operate on the specified resource, "
                    "or this API doesn't support RAM.",
                    403,
                )
            with self.world.lock:
                try:
                    result = handler(self.world, params)
                except EcsApiError as exc:
                    self.faults.refused[(action, exc.code)] += 1
                    raise
            if admission.answer_delay > 0:
                await asyncio.sleep(admission.answer_delay)
        except EcsApiError as exc:
            return self._error(exc, request_id)
        except Exception as exc:  # an emulator bug: answer like ECS, but say what broke
            internal = EcsApiError("InternalError", f"emulator: {type(exc).__name__}: {exc}", 500)
            return self._error(internal, request_id)
        return web.json_response({"RequestId": request_id, **result})

    @staticmethod
    def _error(exc: EcsApiError, request_id: str) -> web.Response:
        body = {
            "Code": exc.code,
            "Message": exc.message,
            "RequestId": request_id,
            "HostId": "ecs.aliyuncs.com",
        }
        return web.json_response(body, status=exc.status)

    # --- instance metadata (IMDSv2) -----------------------------------------------------

    async def _imds_token(self, request: web.Request) -> web.Response:
        ttl = request.headers.get(TOKEN_TTL_HEADER, "")
        if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
            return web.Response(status=400, text=f"{TOKEN_TTL_HEADER} must be 1..21600")
        token = secrets.token_urlsafe(24)
        self._imds_tokens[token] = time.monotonic() + int(ttl)
        return web.Response(text=token)

    def _this_instance(self, request: web.Request) -> InstanceRecord | None:
        """The instance asking: named in the path, else ``metadata_instance_id``, else the only
        one."""
        named = request.match_info.get("instance") or self.metadata_instance_id
        if named:
            return self.world.instances.get(named)
        instances = list(self.world.instances.values())
        return instances[0] if len(instances) == 1 else None

    async def _imds_get(self, request: web.Request) -> web.Response:
        expiry = self._imds_tokens.get(request.headers.get(TOKEN_HEADER, ""), 0.0)
        if expiry < time.monotonic():
            return web.Response(status=401, text="metadata token missing or expired")
        with self.world.lock:
            value = self._metadata_value(
                self._this_instance(request), request.match_info["path"].strip("/")
            )
        if value is None:
            return web.Response(status=404, text="Not Found")
        return web.Response(text=value)

    def _metadata_value(self, inst: InstanceRecord | None, path: str) -> str | None:
        if inst is None:
            return None
        simple = {
            "region-id": self.world.region,
            "instance-id": inst.id,
            "zone-id": inst.zone_id,
            "vpc-id": inst.vpc_id,
            "mac": self.world.enis[inst.primary_eni_id].mac,
        }
        if path in simple:
            return simple[path]
        parts = path.split("/")
        if parts[:3] != ["network", "interfaces", "macs"]:
            return None
        mine = {e.mac: e for e in self.world.enis_of(inst.id)}
        if len(parts) == 3:
            return "\n".join(f"{mac}/" for mac in mine)
        eni = mine.get(parts[3])
        if eni is None or len(parts) != 5:
            return None
        vsw = self.world.vswitches[eni.vswitch_id]
        fields = {
            "primary-ip-address": eni.private_ip,
            "vswitch-cidr-block": vsw.cidr,
            "gateway": vsw.gateway,
            "vswitch-id": vsw.id,
            "vpc-id": eni.vpc_id,
            "network-interface-id": eni.id,
        }
        return fields.get(parts[4])
