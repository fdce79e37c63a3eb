"""The ECS provider's entry point for ``erdma.controller.registry``: the controller config, the
credential file and the region become one ``EcsCloud``."""

from __future__ import annotations

from erdma.controller.cloud import ProviderContext
from erdma.controller.config import ControllerConfig
from erdma.controller.providers.ecs.client import EcsCloud
from erdma.controller.providers.ecs.credentials import (
    CredentialSettings,
    build_credential_client,
    resolve_region,
)
from erdma.controller.providers.ecs.settings import EcsSettings


async def build(config: ControllerConfig, context: ProviderContext) -> EcsCloud:
    """The ECS client from config and ``credential.json``; raises ``ValueError`` (a
    ``CredentialError`` or a bad setting) with a message that names the input and the fix."""
    region = await resolve_region(config.region, base_url=context.metadata_url)
    credential = build_credential_client(
        CredentialSettings.from_file(context.credential_path), env=context.environ
    )
    settings = EcsSettings(
        region=region,
        endpoint=config.ecs_endpoint,
        protocol=config.ecs_protocol,
        public_network=context.environ.get("PUBLIC_NETWORK", "").lower() == "true",
        rate_limit=config.ecs_rate_limit,
        burst=config.ecs_burst,
        timeout_seconds=config.ecs_timeout_seconds,
    )
    return EcsCloud(settings, credential, metrics=context.metrics)
