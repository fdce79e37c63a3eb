"""Cloud providers by name: the one place that knows which providers exist.

Each provider is a package under ``erdma.controller.providers`` whose ``provider`` module has a
``build`` function (``erdma.controller.cloud.BuildCloud``). The registry holds module paths,
not modules, so the reconciler never imports a provider (import-linter checks it) and a
process loads only the SDK of the provider it runs. Adding a provider is its package plus one
entry in ``PROVIDERS``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import cast

from erdma.controller.cloud import BuildCloud, CloudApi, ProviderContext
from erdma.controller.config import ConfigError, ControllerConfig

#: the provider every existing configuration runs on
DEFAULT_PROVIDER = "ecs"
#: provider name -> the module with its ``build``
PROVIDERS: Mapping[str, str] = {"ecs": "erdma.controller.providers.ecs.provider"}


def lookup(name: str, providers: Mapping[str, str] = PROVIDERS) -> BuildCloud:
    """The ``build`` of provider ``name``; a ``ConfigError`` naming the value and the accepted
    names when there is no such provider (the name comes from code today: ECS is the only
    provider, so no setting chooses one yet)."""
    module = providers.get(name)
    if module is None:
        accepted = ", ".join(sorted(providers))
        raise ConfigError(f"cloud provider {name!r} is not known; accepted: {accepted}")
    return cast(BuildCloud, importlib.import_module(module).build)


async def build_cloud(
    config: ControllerConfig,
    context: ProviderContext,
    name: str = DEFAULT_PROVIDER,
    providers: Mapping[str, str] = PROVIDERS,
) -> CloudApi:
    """The ``CloudApi`` of provider ``name``, built from ``config`` and ``context``."""
    return await lookup(name, providers)(config, context)
