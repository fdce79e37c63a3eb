"""The admission webhooks the controller serves on every replica (not only the leader).

`/validate-rdma-hca` keeps `rdma/hca` to hostNetwork pods unless non-hostNetwork RDMA is on;
`/mutate-pods-smcr` injects the SMC-R init container when enabled. Certificates come from the
shared Secret, and the caBundle of the webhook configurations is kept in step.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from lightkube import AsyncClient

from erdma import __version__
from erdma.controller.config import ControllerConfig
from erdma.controller.webhook_certs import (
    WebhookCertSettings,
    maintain_ca_bundles,
    setup_webhook_certs,
)
from erdma.webhook import hostnetwork, smcr
from erdma.webhook.review import Handler
from erdma.webhook.server import WebhookServer, start_webhook

DEFAULT_SMCR_INIT_IMAGE = f"erdma-k8s/erdma:{__version__}"


def webhook_routes(config: ControllerConfig) -> dict[str, Handler]:
    routes: dict[str, Handler] = {
        hostnetwork.PATH: hostnetwork.HostNetworkRdmaValidator(
            resources=tuple(config.shared_resource_names),
            non_host_network_rdma=config.non_host_network_rdma,
        )
    }
    if config.enable_init_container_inject and config.enable_device_plugin:
        routes[smcr.PATH] = smcr.SmcrInjector(config.smc_init_image or DEFAULT_SMCR_INIT_IMAGE)
    return routes


async def start_webhooks(
    config: ControllerConfig, client: AsyncClient
) -> tuple[WebhookServer, asyncio.Task[None]]:
    """Serve the webhooks; returns the server and the task that keeps caBundles current."""
    certs = await setup_webhook_certs(
        client,
        WebhookCertSettings(
            name=config.controller_name,
            namespace=config.controller_namespace,
            cert_dir=Path(config.cert_dir),
            cluster_domain=config.cluster_domain,
        ),
    )
    server = await start_webhook(
        webhook_routes(config),
        certs.files["tls.crt"],
        certs.files["tls.key"],
        port=config.webhook_port,
    )
    keeper = asyncio.create_task(
        maintain_ca_bundles(
            client, config.controller_name, certs.bundle.ca_crt, first=certs.ca_bundle
        )
    )
    return server, keeper
