"""kopf wiring: watch Nodes and ERdmaDevices, feed a work queue, run the reconciler on it.

kopf owns watching (list + watch, reconnects, resource discovery) and login. The handlers here
are low-level event handlers only: they store no progress annotations on Nodes and add no
finalizers, so the controller never writes to objects it does not own. Each relevant event puts
the Node name on the ``WorkQueue``; workers run ``NodeReconciler.reconcile`` and requeue at the
interval it asks for (Pending, Node not Ready, periodic re-verification, errors). Beside them the
``OrphanSweeper`` looks for ERIs of ours that no Node stands for, at start and then at the
re-verification interval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kopf

from erdma.aio import SupervisedTask, Supervisor
from erdma.controller.orphans import OrphanSweeper
from erdma.controller.reconcile import NodeReconciler
from erdma.controller.watch_guard import WatchHealth, guarding
from erdma.controller.workqueue import WorkQueue
from erdma.kube import crd
from erdma.kube.client import LIST_PAGE_SIZE, kube_config

log = logging.getLogger(__name__)

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
#: seconds kopf keeps an object's worker after its last event (see operator_settings)
WORKER_IDLE_SECONDS = 0.5
#: kopf's own retries of a list or watch request the server answered 5xx or 429 (kopf's default
#: spends 54 s): after these the watch guard re-lists with its backoff and /readyz shows it
KOPF_REQUEST_RETRIES = (0.5, 1.0, 2.0)


def node_signature(body: Mapping[str, Any], owned: bool) -> tuple[object, ...]:
    """The Node facts that change what the controller should do; other updates are ignored.

    Ownership (nodeSelector), readiness, providerID, instance type and deletion, as the
    reference's update predicate, plus the InternalIP used for the instance lookup.
    """
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    ready = next(
        (c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"),
        None,
    )
    ips = tuple(
        a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"
    )
    return (
        owned,
        ready,
        (body.get("spec") or {}).get("providerID"),
        (meta.get("labels") or {}).get(INSTANCE_TYPE_LABEL),
        bool(meta.get("deletionTimestamp")),
        ips,
    )


def login_handler(kubeconfig: str | Path | None) -> Any:
    """A kopf login handler using the same kubeconfig resolution as ``erdma.kube.client``."""

    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        single = kube_config(kubeconfig).get()
        if single is None:
            raise kopf.LoginError("the kubeconfig has no current context")
        user, cluster = single.user, single.cluster
        embedded = user is not None and user.client_cert_data  # kubeadm's admin.conf, kind
        if user is None or not (user.client_cert or embedded or user.token or user.token_file):
            return kopf.login_with_service_account(**kwargs)
        token = user.token
        if not token and user.token_file:
            token = Path(single.abs_file(user.token_file)).read_text().strip()
        return kopf.ConnectionInfo(
            server=cluster.server,
            ca_path=single.abs_file(cluster.certificate_auth) if cluster.certificate_auth else None,
            ca_data=cluster.certificate_auth_data,
            insecure=cluster.insecure or None,
            scheme="Bearer" if token else None,
            token=token,
            certificate_path=single.abs_file(user.client_cert) if user.client_cert else None,
            certificate_data=user.client_cert_data,
            private_key_path=single.abs_file(user.client_key) if user.client_key else None,
            private_key_data=user.client_key_data,
            default_namespace=single.namespace,
        )

    return login


def build_registry(
    reconciler: NodeReconciler, queue: WorkQueue, kubeconfig: str | Path | None
) -> kopf.OperatorRegistry:
    """Handlers on a private registry, so several controllers can run in one process (tests)."""
    registry = kopf.OperatorRegistry()
    seen: dict[str, tuple[object, ...]] = {}

    async def on_node(type: str | None, name: str, body: kopf.Body, **_: Any) -> None:
        if type == "DELETED":
            seen.pop(name, None)
            queue.add(name)
            return
        signature = node_signature(body, reconciler.config.owns(dict(body.metadata.labels)))
        if seen.get(name) != signature:
            seen[name] = signature
            queue.add(name)

    async def on_device(type: str | None, name: str, body: kopf.Body, **_: Any) -> None:
        # Initial listing (type None) finds objects of Nodes deleted while we were down;
        # deletion (garbage collection of the Node's object) must run the cloud cleanup.
        if type in (None, "DELETED") or body.metadata.get("deletionTimestamp"):
            queue.add(name)

    kopf.on.event("", "v1", "nodes", registry=registry)(on_node)
    kopf.on.event(crd.GROUP, crd.VERSION, crd.PLURAL, registry=registry)(on_device)
    kopf.on.login(registry=registry)(login_handler(kubeconfig))
    return registry


def operator_settings() -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False  # our EventRecorder posts meaningful Events instead
    # Nodes and the chart's CRD (installed before the controller) are found once at start; no
    # list/watch of CRDs, which the chart's RBAC does not grant (kopf would warn about it).
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    # The initial list of Nodes (and ERdmaDevices) in pages, as client-go's informers do, not
    # one response holding the whole cluster: kopf hands each page to the handlers and drops it
    settings.watching.chunk_size = LIST_PAGE_SIZE
    # kopf keeps each object's worker, and with it the object's last event body, until no new
    # event came for idle_timeout (5 s by default): at start every listed Node's body was alive
    # at once, 80 MiB of the controller's peak with 5,000 Nodes (bench/RESULTS.md); at 0.5 s a
    # worker is still reused for a burst of events on one object
    settings.queueing.idle_timeout = WORKER_IDLE_SECONDS
    settings.networking.error_backoffs = KOPF_REQUEST_RETRIES
    return settings


async def run_workers(reconciler: NodeReconciler, queue: WorkQueue, workers: int) -> None:
    """Run reconciles from the queue forever (until cancelled)."""

    async def worker() -> None:
        while True:
            name = await queue.get()
            delay: float | None = None
            try:
                delay = await reconciler.reconcile(name)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not kill the worker: log, back off, try again
                log.exception("reconcile of node %s failed unexpectedly", name)
                delay = reconciler.config.error_requeue_seconds
            finally:
                if delay is not None:
                    queue.add(name, delay, follow_up=reconciler.bringing_up(name))
                queue.done(name)

    await asyncio.gather(*(worker() for _ in range(workers)))


async def run_operator(
    reconciler: NodeReconciler,
    kubeconfig: str | Path | None,
    stop: asyncio.Event | None = None,
    ready: asyncio.Event | None = None,
    watches: WatchHealth | None = None,
) -> None:
    """kopf, the workers and the orphan sweeps, until ``stop`` is set or the task is cancelled.

    A failing watch re-lists with backoff instead of ending the operator (`watch_guard`), and
    ``watches`` tells the health endpoint about it.
    """
    queue = WorkQueue(observe_wait=reconciler.metrics.queue_wait.observe)
    reconciler.metrics.watch_queue(queue.__len__)
    registry = build_registry(reconciler, queue, kubeconfig)
    sweeper = OrphanSweeper(reconciler.kube, reconciler.cloud, reconciler.config)
    config = reconciler.config
    background = Supervisor(
        [
            SupervisedTask(
                "reconcile workers",
                lambda: run_workers(reconciler, queue, config.reconcile_workers),
            ),
            SupervisedTask("orphan sweeps", lambda: sweeper.run(config.reverify_interval_seconds)),
        ],
        log,
    )
    settings = operator_settings()
    async with background:  # a worker or sweep that dies is logged and restarted with backoff
        with guarding(settings, watches or WatchHealth()):
            await kopf.operator(
                registry=registry,
                settings=settings,
                clusterwide=True,
                standalone=True,
                stop_flag=stop,
                ready_flag=ready,
            )
