"""``erdma controller``: load config and credentials, elect a leader, run the operator.

Startup fails fast with one clear line for a bad config, bad credential file or unreachable
region lookup. The health endpoint (``/healthz``, ``/readyz``) answers from the first second on
every replica, leader or standby, so Kubernetes probes do not restart a healthy standby; both
say whether this replica leads. The same port serves the Prometheus metrics at ``/metrics``
(``erdma.controller.metrics``); a standby's show no reconciles and no ECS calls.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import click
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from erdma.aio import Heartbeat, OnFailure, SupervisedTask, Supervisor, stop_on_signals
from erdma.controller.cloud import CloudApi, ProviderContext
from erdma.controller.config import DEFAULT_CONFIG_PATH, ConfigError, ControllerConfig, load_config
from erdma.controller.handlers import run_operator
from erdma.controller.metrics import ControllerMetrics
from erdma.controller.reconcile import NodeReconciler
from erdma.controller.registry import build_cloud
from erdma.controller.serving import ServingLoop
from erdma.controller.watch_guard import WatchHealth
from erdma.controller.webhook_certs import WebhookCertError
from erdma.controller.webhooks import start_webhooks
from erdma.host.metadata import DEFAULT_BASE_URL
from erdma.kube.client import KubeApi, new_client
from erdma.kube.events import EventRecorder
from erdma.kube.leader import LeaderElector
from erdma.logs import setup_json_logging

log = logging.getLogger(__name__)

#: a loop silent this long is wedged (it beats every second)
WEDGED_AFTER = 30.0
#: where the chart mounts the cloud provider's credential file
DEFAULT_CREDENTIAL_PATH = "/etc/erdma-controller-credential/credential.json"


class Health:
    """State behind the health endpoints, served on a loop apart from the one it watches.

    ``/healthz`` (liveness) fails when the controller's event loop stopped beating: a wedged
    replica is restarted. ``/readyz`` fails while the API server has not answered this replica
    for a lease duration, or while a watch of the leader keeps failing: a leader or a healthy
    standby is ready, a replica cut off or blind is not.
    """

    def __init__(self, elector: LeaderElector | None) -> None:
        self.elector = elector
        self.heartbeat = Heartbeat()
        self.watches = WatchHealth()

    @property
    def leader(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def _answer(self, problem: str) -> web.Response:
        body = {"status": problem or "ok", "leader": self.leader}
        return web.json_response(body, status=503 if problem else 200)

    async def healthz(self, _: web.Request) -> web.Response:
        silent = self.heartbeat.age()
        return self._answer(f"event loop silent for {silent:.0f}s" if silent > WEDGED_AFTER else "")

    async def readyz(self, _: web.Request) -> web.Response:
        problem = ""
        if self.elector is not None:
            silent = time.monotonic() - self.elector.last_answer
            if silent > self.elector.duration:
                problem = f"the API server has not answered for {silent:.0f}s"
        return self._answer(problem or self.watches.problem())

    async def serve(self, port: int, registry: CollectorRegistry) -> web.AppRunner:
        """Probes and, at ``/metrics``, the Prometheus metrics of ``registry`` on ``port``."""

        async def scrape(_: web.Request) -> web.Response:
            body = generate_latest(registry)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = web.Application()
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", scrape)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "0.0.0.0", port).start()
        return runner


async def run_controller(
    config: ControllerConfig,
    cloud: CloudApi,
    *,
    kubeconfig: str | Path | None = None,
    leader_elect: bool = True,
    identity: str | None = None,
    health_port: int | None = None,
    stop: asyncio.Event | None = None,
    controller_metrics: ControllerMetrics | None = None,
) -> None:
    """Run until ``stop`` is set (or the task is cancelled); the in-process entry for tests.

    Without ``stop`` (the `erdma controller` command), SIGTERM, SIGINT and SIGHUP stop it
    through its shutdown path: the operator stops, the Lease is released, the exit code is 0.

    The metrics served are ``controller_metrics``, by default those ``cloud`` counts its calls
    in (so cloud calls and reconciles share one registry). When it returns, ``cloud``'s HTTP
    connections are closed (``CloudApi.close``).

    The background work runs under one `Supervisor`: the webhook certificate keeper restarts
    with backoff when it dies (the served certificate stays valid meanwhile), while a failure
    of the operator or of leader election raises `TaskFailed` so the process exits: a replica
    that cannot tell whether it still leads must not keep reconciling.
    """
    signals = stop is None and threading.current_thread() is threading.main_thread()
    stop = stop or asyncio.Event()
    if signals:
        stop_on_signals(stop)
    client = new_client(kubeconfig)
    elector = None
    if leader_elect:  # a client of its own: renews never queue behind reconciles' requests
        elector = LeaderElector(
            new_client(kubeconfig),
            config.controller_namespace,
            config.lease_name,
            identity or f"{socket.gethostname()}_{uuid.uuid4()}",
            config.lease_duration_seconds,
        )
    controller_metrics = controller_metrics or cloud.metrics
    health = Health(elector)  # before serving: a starting replica must not read as leader
    port = config.health_port if health_port is None else health_port
    serving = ServingLoop()
    runner = await serving.run(health.serve(port, controller_metrics.registry)) if port else None
    webhook = None
    try:
        tasks = [SupervisedTask("heartbeat", health.heartbeat.beat_forever)]
        if config.enable_webhook:
            webhook, keeper = await start_webhooks(config, client, serving)
            tasks.append(keeper)
        reconciler = NodeReconciler(
            KubeApi(client),
            cloud,
            config,
            EventRecorder(client),
            controller_metrics=controller_metrics,
        )

        async def work() -> None:
            try:
                await run_operator(reconciler, kubeconfig, stop=stop, watches=health.watches)
            finally:
                if signals:  # kopf put its own SIGINT/SIGTERM handlers in place of ours
                    stop_on_signals(stop)
            if not stop.is_set():  # kopf returns only when stopped: by a signal it caught
                log.info("the operator stopped on a signal; the controller stops")
                stop.set()

        if elector is not None:
            run_elector = elector.run
            tasks.append(
                SupervisedTask("leader election", lambda: run_elector(work), OnFailure.EXIT)
            )
        else:
            tasks.append(SupervisedTask("operator", work, OnFailure.EXIT))
        await Supervisor(tasks, log).run(stop)
    finally:
        if webhook is not None:
            await serving.run(webhook.stop())
        if runner is not None:
            await serving.run(runner.cleanup())
        await serving.close()
        await client.close()
        if elector is not None:
            await elector.client.close()
        await cloud.close()  # its HTTP connections: a later call opens what it needs


class StartupError(click.ClickException):
    """A bad config, kubeconfig, credential file or region at start: exit code 2, reported
    in one line like every `erdma` error (erdma.cli)."""

    exit_code = 2


@click.command("controller")
@click.option("--config-path", default=DEFAULT_CONFIG_PATH, show_default=True, help="config.json")
@click.option(
    "--credential-path",
    default=DEFAULT_CREDENTIAL_PATH,
    show_default=True,
    help="credential.json; a missing file means AccessKey credentials from nowhere",
)
@click.option("--kubeconfig", default=None, help="kubeconfig file; default: in-cluster")
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True)
@click.option("--metadata-url", default=DEFAULT_BASE_URL, show_default=True, hidden=True)
@click.option("-v", "--verbose", is_flag=True, help="debug logging")
def controller_command(
    config_path: str,
    credential_path: str,
    kubeconfig: str | None,
    leader_elect: bool,
    metadata_url: str,
    verbose: bool,
) -> None:
    """Run the Regular-mode controller: ERIs through the ECS OpenAPI, ERdmaDevice objects."""
    setup_json_logging("debug" if verbose else "info")
    if kubeconfig and not Path(kubeconfig).is_file():
        why = "is not a file" if Path(kubeconfig).exists() else "no such file"
        raise StartupError(
            f"--kubeconfig={kubeconfig!r}: {why}; give an existing kubeconfig or leave it out "
            "for in-cluster access"
        )
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        raise StartupError(str(exc)) from None

    async def main() -> Any:
        context = ProviderContext(credential_path, metadata_url, ControllerMetrics(), os.environ)
        try:
            cloud = await build_cloud(config, context)
        except ValueError as exc:
            raise StartupError(str(exc)) from None
        log.info("controller starting: %r", cloud)
        try:
            await run_controller(config, cloud, kubeconfig=kubeconfig, leader_elect=leader_elect)
        except (WebhookCertError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
