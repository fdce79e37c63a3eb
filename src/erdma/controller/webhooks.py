"""The admission webhooks the controller serves on every replica (not only the leader).

`/validate-rdma-hca` keeps `rdma/hca` to hostNetwork pods unless non-hostNetwork RDMA is on;
`/mutate-pods-smcr` injects the SMC-R init container when enabled, and `/mutating`, the
reference controller's path, answers as it does (admitting untouched with injection off).
Certificates come from the shared Secret; one background loop keeps the served certificate and
the caBundle of the webhook configurations in step with it for as long as the controller runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from lightkube import AsyncClient

from erdma import __version__
from erdma.aio import SupervisedTask
from erdma.controller.config import ControllerConfig
from erdma.controller.serving import ServingLoop
from erdma.controller.webhook_certs import (
    CaBundleKeeper,
    CertResult,
    WebhookCertError,
    WebhookCertSettings,
    refresh_webhook_certs,
    setup_webhook_certs,
)
from erdma.webhook import hostnetwork, smcr
from erdma.webhook.review import AdmissionRequest, Handler, Verdict
from erdma.webhook.server import WebhookServer, start_webhook

DEFAULT_SMCR_INIT_IMAGE = f"erdma-k8s/erdma:{__version__}"
#: how often the Secret is read (a peer's rotation picked up) and the caBundle re-checked
FOLLOW_INTERVAL = 60.0

log = logging.getLogger(__name__)


def _admit(_request: AdmissionRequest) -> Verdict:
    """Admit untouched: what the reference's `/mutating` answers with injection off."""
    return Verdict()


def webhook_routes(config: ControllerConfig) -> dict[str, Handler]:
    """Path -> handler, as `start_webhook` serves them.

    `/mutating` is served whenever the webhooks are, as the reference served it: a
    MutatingWebhookConfiguration carried over from the reference keeps its path, and one left
    behind with injection off must not turn pod creation away with a 404 under
    ``failurePolicy: Fail``.
    """
    routes: dict[str, Handler] = {
        hostnetwork.PATH: hostnetwork.HostNetworkRdmaValidator(
            resources=tuple(config.shared_resource_names),
            non_host_network_rdma=config.non_host_network_rdma,
        )
    }
    mutating: Handler = _admit
    if config.enable_init_container_inject and config.enable_device_plugin:
        mutating = smcr.SmcrInjector(config.smc_init_image or DEFAULT_SMCR_INIT_IMAGE)
        routes[smcr.PATH] = mutating
    routes[smcr.REFERENCE_PATH] = mutating
    return routes


async def start_webhooks(
    config: ControllerConfig, client: AsyncClient, serving: ServingLoop
) -> tuple[WebhookServer, SupervisedTask]:
    """Serve the webhooks on ``serving``'s loop; returns the server and the (supervised,
    restartable) task that keeps its certificate and the caBundle current."""
    settings = WebhookCertSettings(
        name=config.controller_name,
        namespace=config.controller_namespace,
        cert_dir=Path(config.cert_dir),
        cluster_domain=config.cluster_domain,
    )
    certs = await setup_webhook_certs(client, settings)
    server = await serving.run(
        start_webhook(
            webhook_routes(config),
            certs.files["tls.crt"],
            certs.files["tls.key"],
            port=config.webhook_port,
        )
    )
    keeper = SupervisedTask(
        "webhook certificates",
        lambda: maintain_webhooks(
            client, settings, server, certs, config.webhook_cert_check_seconds
        ),
    )
    return server, keeper


async def maintain_webhooks(
    client: AsyncClient,
    settings: WebhookCertSettings,
    server: WebhookServer,
    first: CertResult,
    check_interval: float,
    follow_interval: float = FOLLOW_INTERVAL,
    stop: asyncio.Event | None = None,
) -> None:
    """Keep ``server``'s certificate and the caBundle in step with the Secret until ``stop``.

    Every ``check_interval`` the startup step runs again, so the Secret is rotated when due (or
    re-created when deleted). Every ``follow_interval`` the Secret is only read, so a peer's
    rotation is served here within that time. Both are one loop because the caBundle must
    follow the served CA: a replica patching in a CA its peer has replaced would turn the API
    server away from the peer's new certificate at every check. A failed round is logged and
    retried at the next one.
    """
    stop = stop or asyncio.Event()
    clock = asyncio.get_running_loop().time
    served = first.bundle
    ca_bundles = CaBundleKeeper(client, settings.name, first.ca_bundle)
    next_check = clock() + check_interval
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                stop.wait(), max(0.0, min(follow_interval, next_check - clock()))
            )
        if stop.is_set():
            return
        rotate = clock() >= next_check
        if rotate:
            next_check = clock() + check_interval
        try:
            changed = await refresh_webhook_certs(client, settings, served, rotate)
            if changed is not None:
                server.reload_certificate()
                served = changed.bundle
        except (WebhookCertError, ValueError) as exc:
            log.warning("webhook certificate not refreshed, retrying: %s", exc)
        except Exception:
            log.exception("webhook certificate not refreshed, retrying")
        try:
            await ca_bundles.check(served.ca_crt)
        except Exception:
            log.exception("caBundle check failed, retrying")
