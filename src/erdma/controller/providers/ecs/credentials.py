"""Who the controller is towards Alibaba Cloud, and which region it works in.

``credential.json`` (mounted from the chart's Secret) selects a credential type compatible with
the reference controller:

- ``""``/``access_key``: ``accessKeyID`` + ``accessKeySecret``, else the credentials library's
  variables ``ALIBABA_CLOUD_ACCESS_KEY_ID``/``_SECRET``, which the chart fills from
  ``credentials.existingSecret`` so that the AccessKey never passes through Helm values;
- ``ecs_ram_role``: the instance's RAM role, through IMDSv2 only;
- ``oidc_role_arn``: RRSA, the ``ALIBABA_CLOUD_*`` variables ACK pod identity injects;
- ``ram_role_sts``: the add-on STS token of ACK managed clusters (``sts_token``).

The chosen type is turned into an ``alibabacloud_credentials`` client, which refreshes temporary
credentials by itself.

Secrets never appear in ``repr``, ``str`` or error messages.  The region comes from the config
or, when empty, from the ECS metadata service (IMDSv2 token first, as the reference does).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alibabacloud_credentials.client import Client as CredentialClient  # type: ignore[import-untyped]
from alibabacloud_credentials.models import Config as CredentialConfig  # type: ignore[import-untyped]

from erdma.controller.providers.ecs.sts_token import (
    DEFAULT_TOKEN_FILE,
    AddonTokenProvider,
    TokenError,
)
from erdma.host.metadata import DEFAULT_BASE_URL, MetadataClient, MetadataError

ACCEPTED_TYPES = ("access_key", "ecs_ram_role", "oidc_role_arn", "ram_role_sts")
#: where the credentials library (and the chart, from credentials.existingSecret) puts an AccessKey
ACCESS_KEY_ENV = ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET")
KEY_NAMES = ("accessKeyID", "accessKeySecret")
OIDC_ENV = (
    "ALIBABA_CLOUD_ROLE_ARN",
    "ALIBABA_CLOUD_OIDC_PROVIDER_ARN",
    "ALIBABA_CLOUD_OIDC_TOKEN_FILE",
)
KNOWN_KEYS = ("type", "accessKeyID", "accessKeySecret", "roleName", "stsTokenFile")


class CredentialError(ValueError):
    """The credential configuration cannot work; the message names the key and the fix."""


@dataclass(frozen=True)
class CredentialSettings:
    """The parsed ``credential.json``.  ``access_key_secret`` is excluded from repr."""

    type: str = "access_key"
    access_key_id: str = ""
    access_key_secret: str = field(default="", repr=False)
    role_name: str = ""
    sts_token_file: str = DEFAULT_TOKEN_FILE

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> CredentialSettings:
        """Validate the JSON keys; unknown type or key is an error listing what is accepted."""
        unknown = sorted(set(data) - set(KNOWN_KEYS))
        if unknown:
            raise CredentialError(
                f"credential key(s) {unknown} are not recognised; accepted: {list(KNOWN_KEYS)}"
            )
        for key in KNOWN_KEYS:
            if key in data and not isinstance(data[key], str):
                raise CredentialError(
                    f"credential key {key!r} must be a string, got {type(data[key]).__name__}"
                )
        kind = data.get("type") or "access_key"
        if kind not in ACCEPTED_TYPES:
            raise CredentialError(
                f"credentials.type {kind!r} is not supported; accepted: "
                f"{', '.join(repr(t) for t in ('', *ACCEPTED_TYPES))}"
            )
        return cls(
            type=kind,
            access_key_id=data.get("accessKeyID", ""),
            access_key_secret=data.get("accessKeySecret", ""),
            role_name=data.get("roleName", ""),
            sts_token_file=data.get("stsTokenFile") or DEFAULT_TOKEN_FILE,
        )

    @classmethod
    def from_file(cls, path: str | Path) -> CredentialSettings:
        """Read ``credential.json``; a missing file means empty AccessKey credentials."""
        file = Path(path)
        if not file.exists():
            return cls()
        try:
            data = json.loads(file.read_text() or "{}")
        except json.JSONDecodeError as exc:
            raise CredentialError(
                f"{file} is not valid JSON: line {exc.lineno}: {exc.msg}"
            ) from None
        if not isinstance(data, dict):
            raise CredentialError(f"{file} must hold a JSON object, got {type(data).__name__}")
        return cls.from_mapping(data)


def build_credential_client(
    settings: CredentialSettings, env: Mapping[str, str] | None = None
) -> CredentialClient:
    """The ``alibabacloud_credentials`` client for the configured type."""
    env = os.environ if env is None else env
    if settings.type == "access_key":
        key_id = settings.access_key_id or env.get(ACCESS_KEY_ENV[0], "")
        secret = settings.access_key_secret or env.get(ACCESS_KEY_ENV[1], "")
        absent = [
            (key, var)
            for key, var, value in zip(KEY_NAMES, ACCESS_KEY_ENV, (key_id, secret), strict=True)
            if not value
        ]
        if absent:
            keys, variables = (" and ".join(names) for names in zip(*absent, strict=True))
            raise CredentialError(
                f"credentials.type 'access_key' needs {keys} in credential.json, or env "
                f"{variables} (the chart sets them from credentials.existingSecret)"
            )
        config = CredentialConfig(type="access_key", access_key_id=key_id, access_key_secret=secret)
    elif settings.type == "ram_role_sts":
        try:
            return CredentialClient(provider=AddonTokenProvider(settings.sts_token_file))
        except TokenError as exc:
            raise CredentialError(f"credentials.type 'ram_role_sts': {exc}") from None
    elif settings.type == "ecs_ram_role":
        config = CredentialConfig(
            type="ecs_ram_role", role_name=settings.role_name or None, disable_imds_v1=True
        )
    else:
        missing = [name for name in OIDC_ENV if not env.get(name)]
        if missing:
            raise CredentialError(
                f"credentials.type 'oidc_role_arn' needs environment variable(s) {missing}; "
                "enable RRSA pod identity (ServiceAccount annotation "
                "pod-identity.alibabacloud.com/role-name)"
            )
        config = CredentialConfig(
            type="oidc_role_arn",
            role_arn=env["ALIBABA_CLOUD_ROLE_ARN"],
            oidc_provider_arn=env["ALIBABA_CLOUD_OIDC_PROVIDER_ARN"],
            oidc_token_file_path=env["ALIBABA_CLOUD_OIDC_TOKEN_FILE"],
            role_session_name="erdma-controller",
        )
    return CredentialClient(config)


async def resolve_region(configured: str, *, base_url: str = DEFAULT_BASE_URL) -> str:
    """The configured region, else the one the metadata service reports."""
    if configured:
        return configured
    try:
        return await MetadataClient(base_url).region_id()
    except MetadataError as exc:
        raise CredentialError(f"region not configured and {exc}") from None
