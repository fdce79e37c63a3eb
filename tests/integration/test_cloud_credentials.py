"""Credential types the chart can configure: an AccessKey from the environment (filled from
`credentials.existingSecret`) and `ram_role_sts` (ACK's encrypted add-on STS token, mounted as
a file), built into the credentials library's client and used against the ECS emulator."""

from __future__ import annotations

import base64
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alibabacloud_credentials.exceptions import CredentialException  # type: ignore[import-untyped]
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from erdma.controller.providers.ecs.client import EcsCloud
from erdma.controller.providers.ecs.credentials import (
    CredentialError,
    CredentialSettings,
    build_credential_client,
)
from erdma.controller.providers.ecs.settings import EcsSettings
from erdma.controller.providers.ecs.sts_token import AddonTokenProvider, parse_token
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GENERAL_ERI, standard_world

KEYRING = "0123456789abcdef0123456789abcdef"  # AES-256, as ACK's keyring
ENV = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAI-env", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "env-secret"}


def _encrypt(plain: str, keyring: str = KEYRING) -> str:
    padder = padding.PKCS7(128).padder()
    data = padder.update(plain.encode()) + padder.finalize()
    iv = os.urandom(16)
    encryptor = Cipher(algorithms.AES(keyring.encode()), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(data) + encryptor.finalize()).decode()


def write_token(path: Path, key_id: str, secret: str, token: str, expires: datetime) -> Path:
    """The `addon.token.config` document ACK writes, encrypted the way ACK encrypts it."""
    doc = {
        "access.key.id": _encrypt(key_id),
        "access.key.secret": _encrypt(secret),
        "security.token": _encrypt(token),
        "expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "keyring": KEYRING,
    }
    path.write_text(json.dumps(doc))
    return path


FAR = datetime(2099, 1, 1, tzinfo=UTC)


def test_access_key_comes_from_the_environment_when_the_file_has_none() -> None:
    client = build_credential_client(CredentialSettings("access_key"), env=ENV)
    credential = client.get_credential()
    assert (credential.access_key_id, credential.access_key_secret) == ("LTAI-env", "env-secret")
    assert credential.type == "access_key"
    with pytest.raises(CredentialError) as info:
        build_credential_client(CredentialSettings("access_key"), env={})
    assert "accessKeyID and accessKeySecret in credential.json" in str(info.value)
    assert "ALIBABA_CLOUD_ACCESS_KEY_SECRET" in str(info.value)
    assert "credentials.existingSecret" in str(info.value)


def test_ram_role_sts_decrypts_the_addon_token(tmp_path: Path) -> None:
    token_file = write_token(tmp_path / "token-config", "STS.id", "sts-secret", "tok3n", FAR)
    settings = CredentialSettings.from_mapping(
        {"type": "ram_role_sts", "stsTokenFile": str(token_file)}
    )
    credential = build_credential_client(settings).get_credential()
    assert credential.type == "ram_role_sts"
    assert credential.access_key_id == "STS.id"
    assert (credential.access_key_secret, credential.security_token) == ("sts-secret", "tok3n")
    assert "sts-secret" not in repr(parse_token(token_file.read_text(), "token-config"))
    assert CredentialSettings("ram_role_sts").sts_token_file == "/var/addon/token-config"


def test_ram_role_sts_reads_the_rotated_token_after_five_minutes(tmp_path: Path) -> None:
    now = [1000.0]
    token_file = write_token(tmp_path / "token-config", "STS.old", "s1", "t1", FAR)
    provider = AddonTokenProvider(token_file, clock=lambda: now[0])
    write_token(token_file, "STS.new", "s2", "t2", FAR)
    now[0] += 299
    assert provider.get_credentials().get_access_key_id() == "STS.old"
    now[0] += 2
    assert provider.get_credentials().get_access_key_id() == "STS.new"


def test_ram_role_sts_keeps_a_valid_token_while_the_file_is_unreadable(tmp_path: Path) -> None:
    expires = datetime(2030, 1, 1, tzinfo=UTC)
    now = [expires.timestamp() - 3600]
    token_file = write_token(tmp_path / "token-config", "STS.id", "s", "t", expires)
    provider = AddonTokenProvider(token_file, clock=lambda: now[0])
    token_file.write_text("{broken")
    now[0] += 600
    assert provider.get_credentials().get_security_token() == "t"
    now[0] = expires.timestamp() + 1
    with pytest.raises(CredentialException, match="expired and not renewed"):
        provider.get_credentials()


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "addon.token.config of Secret kube-system/addon.network.token"),
        ("[]", "expected a JSON object"),
        ('{"keyring": "k"}', "missing or non-string field(s)"),
        ("bad-keyring", "field 'access.key.id' does not decrypt with keyring"),
        ("bad-expiration", "is not of the form 2006-01-02T15:04:05Z"),
    ],
)
def test_a_bad_token_file_stops_the_start_naming_file_and_field(
    tmp_path: Path, content: str | None, needle: str
) -> None:
    token_file = tmp_path / "token-config"
    if content in ("bad-keyring", "bad-expiration"):
        write_token(token_file, "STS.id", "s", "t", FAR)
        doc = json.loads(token_file.read_text())
        if content == "bad-keyring":
            doc["keyring"] = "fedcba9876543210fedcba9876543210"
        else:
            doc["expiration"] = "tomorrow"
        token_file.write_text(json.dumps(doc))
    elif content is not None:
        token_file.write_text(content)
    with pytest.raises(CredentialError) as info:
        build_credential_client(CredentialSettings("ram_role_sts", sts_token_file=str(token_file)))
    assert needle in str(info.value) and str(token_file) in str(info.value)
    assert "ram_role_sts" in str(info.value)


async def test_ecs_calls_are_signed_with_the_decrypted_sts_secret(tmp_path: Path) -> None:
    """The emulator checks each request's signature against the secret it knows for the key."""
    token_file = write_token(tmp_path / "token-config", "STS.erdma", "decrypted-secret", "t", FAR)
    credential = build_credential_client(
        CredentialSettings("ram_role_sts", sts_token_file=str(token_file))
    )
    world = standard_world()
    record = world.add_instance(GENERAL_ERI.name)
    async with EcsEmulator(world, access_keys={"STS.erdma": "decrypted-secret"}) as emu:
        settings = EcsSettings(region=world.region, endpoint=emu.endpoint, protocol="HTTP")
        found = await EcsCloud(settings, credential).find_instance(instance_id=record.id)
    assert found is not None and found.id == record.id
