"""The agent's HTTP port: Prometheus metrics, ``/healthz`` and ``/readyz`` for kubelet's probes.

``/healthz`` (liveness) fails only when the agent's event loop stopped beating: restarting a
live agent whose driver is missing would only lose its device plugins. ``/readyz`` (readiness,
what a DaemonSet rollout waits for with ``minReadySeconds``) needs the driver state known (the
erdma module loaded in the chosen mode when the agent prepares the node) and every configured
resource registered with kubelet, so a bad ``preferDriver`` or image stops a rollout at its
first wave. The server runs in a thread (as prometheus_client's does), apart from the loop it
watches.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from erdma.aio import Heartbeat
from erdma.deviceplugin.lifecycle import PluginRunner

#: a loop silent this long is wedged: rescans run every 0.5 s and each beat is 1 s apart
WEDGED_AFTER = 30.0

#: a readiness check: None when satisfied, else what is missing, for people
Check = Callable[[], str | None]


@dataclass
class Probes:
    heartbeat: Heartbeat
    readiness: Iterable[Check]

    def healthz(self) -> tuple[int, dict[str, Any]]:
        silent = self.heartbeat.age()
        if silent > WEDGED_AFTER:
            return 503, {"status": "wedged", "reason": f"event loop silent for {silent:.0f}s"}
        return 200, {"status": "ok"}

    def readyz(self) -> tuple[int, dict[str, Any]]:
        missing = [why for check in self.readiness if (why := check()) is not None]
        if missing:
            return 503, {"status": "not ready", "reasons": missing}
        return 200, {"status": "ok"}


class _QuietHandler(WSGIRequestHandler):
    """No access log line per probe or scrape."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(port: int, registry: CollectorRegistry, probes: Probes, host: str = "") -> int:
    """Serve metrics and probes on ``port`` in a daemon thread; returns the bound port.

    Raises ``OSError`` when the port is taken, for the caller to retry.
    """
    metrics = make_wsgi_app(registry)
    routes = {"/healthz": probes.healthz, "/readyz": probes.readyz}

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        answer = routes.get(environ.get("PATH_INFO", ""))
        if answer is None:
            return metrics(environ, start_response)
        status, body = answer()
        text = json.dumps(body).encode()
        reason = "OK" if status == 200 else "Service Unavailable"
        start_response(f"{status} {reason}", [("Content-Type", "application/json")])
        return [text]

    server = make_server(host, port, app, ThreadingWSGIServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="erdma-http", daemon=True).start()
    return int(server.server_port)


def registered(runner: PluginRunner) -> Check:
    """Ready once ``runner``'s resource has been registered with kubelet, or while nothing on
    the node matches it (it is then kept unregistered on purpose)."""
    name = runner.plugin.resource_name

    def check() -> str | None:
        if runner.registrations or not runner.plugin.advertised():
            return None
        return f"{name} not registered with kubelet yet"

    return check
