"""``ram_role_sts``: the STS token ACK keeps for cluster add-ons, decrypted and kept fresh.

ACK managed clusters hold Secret ``kube-system/addon.network.token``; its key
``addon.token.config`` is JSON with ``access.key.id``, ``access.key.secret`` and
``security.token`` (each base64 of AES-CBC ciphertext under the key ``keyring``, the IV in the
first block, PKCS#7 padding) and ``expiration`` (UTC, ``2006-01-02T15:04:05Z``). The chart mounts
that key as a file; kubelet replaces the file when ACK rotates the token, so the provider reads
it again when the token has expired or 5 minutes after the last read (as the reference
controller does), and keeps the last good token while a read fails before it expires.

The provider is an ``alibabacloud_credentials`` provider: the credentials client and the ECS SDK
use it like any built-in one (the security token travels with every call).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from alibabacloud_credentials.exceptions import CredentialException  # type: ignore[import-untyped]
from alibabacloud_credentials.provider.refreshable import Credentials  # type: ignore[import-untyped]
from alibabacloud_credentials_api import ICredentialsProvider  # type: ignore[import-untyped]
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

log = logging.getLogger(__name__)

DEFAULT_TOKEN_FILE = "/var/addon/token-config"
PROVIDER_NAME = "ram_role_sts"
REREAD_SECONDS = 300.0
EXPIRATION_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_FIELDS = {"access.key.id": "id", "access.key.secret": "secret", "security.token": "token"}
_BLOCK = 16


class TokenError(ValueError):
    """The token file cannot give credentials; the message names the file and the field."""


@dataclass(frozen=True)
class StsToken:
    """One decrypted token; the secret parts are left out of repr."""

    access_key_id: str
    access_key_secret: str = field(repr=False)
    security_token: str = field(repr=False)
    expiration: float  # seconds since the epoch


def _decrypt(text: str, keyring: bytes) -> str:
    data = base64.b64decode(text, validate=True)
    if len(data) < 2 * _BLOCK or len(data) % _BLOCK:
        raise ValueError(f"{len(data)} bytes is not an IV plus whole AES blocks")
    decryptor = Cipher(algorithms.AES(keyring), modes.CBC(data[:_BLOCK])).decryptor()
    padded = decryptor.update(data[_BLOCK:]) + decryptor.finalize()
    unpadder = padding.PKCS7(algorithms.AES.block_size).unpadder()
    return (unpadder.update(padded) + unpadder.finalize()).decode()


def parse_token(text: str, source: str) -> StsToken:
    """Decrypt the JSON of ``addon.token.config``; ``source`` names it in errors."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TokenError(f"{source}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(doc, dict):
        raise TokenError(f"{source}: expected a JSON object, got {type(doc).__name__}")
    missing = [k for k in (*_FIELDS, "expiration", "keyring") if not isinstance(doc.get(k), str)]
    if missing:
        raise TokenError(f"{source}: missing or non-string field(s) {missing}")
    keyring = doc["keyring"].encode()
    plain: dict[str, str] = {}
    for key, name in _FIELDS.items():
        try:
            plain[name] = _decrypt(doc[key], keyring)
        except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
            raise TokenError(
                f"{source}: field {key!r} does not decrypt with keyring: {exc}"
            ) from None
    try:
        expires = datetime.strptime(doc["expiration"], EXPIRATION_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise TokenError(
            f"{source}: expiration {doc['expiration']!r} is not of the form 2006-01-02T15:04:05Z"
        ) from None
    return StsToken(plain["id"], plain["secret"], plain["token"], expires.timestamp())


class AddonTokenProvider(ICredentialsProvider):
    """STS credentials from the mounted add-on token file, read again as described above."""

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._clock = clock
        self._token = self._read()  # a token that cannot be read stops the start, clearly
        self._read_at = clock()

    def _read(self) -> StsToken:
        try:
            text = self.path.read_text()
        except OSError as exc:
            raise TokenError(
                f"{self.path}: {exc.strerror} (the key addon.token.config of Secret "
                "kube-system/addon.network.token, mounted there by the chart)"
            ) from None
        return parse_token(text, str(self.path))

    def _current(self) -> StsToken:
        now = self._clock()
        if now < self._token.expiration and now - self._read_at < REREAD_SECONDS:
            return self._token
        try:
            self._token, self._read_at = self._read(), now
        except TokenError as exc:
            if now >= self._token.expiration:
                raise CredentialException(f"STS token expired and not renewed: {exc}") from None
            log.warning("STS token not re-read; the current one is still valid: %s", exc)
            self._read_at = now
        return self._token

    def get_credentials(self) -> Credentials:
        token = self._current()
        return Credentials(
            access_key_id=token.access_key_id,
            access_key_secret=token.access_key_secret,
            security_token=token.security_token,
            expiration=int(token.expiration),
            provider_name=PROVIDER_NAME,
        )

    async def get_credentials_async(self) -> Credentials:
        return self.get_credentials()

    def get_provider_name(self) -> str:
        return PROVIDER_NAME
