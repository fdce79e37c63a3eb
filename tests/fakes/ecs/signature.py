"""Request authentication as ECS does it: V3 (``ACS3-HMAC-SHA256``) and RPC V2 signatures.

The official Python SDK signs with V3 by default: an ``Authorization`` header naming the
AccessKey id, the signed headers and an HMAC over the canonical request.  Older clients put
``AccessKeyId``/``Signature``/``SignatureNonce``/``SignatureMethod``/``SignatureVersion`` in the
query (V2).  The emulator recomputes either signature with the secret it knows, so a wrong
secret is caught exactly like ECS catches it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from urllib.parse import quote

from tests.fakes.ecs.state import EcsApiError

V3_ALGORITHM = "ACS3-HMAC-SHA256"
V2_FIELDS = ("Signature", "SignatureNonce", "SignatureMethod", "SignatureVersion", "Timestamp")


def _missing(name: str) -> EcsApiError:
    return EcsApiError(
        "MissingParameter",
        f'The input parameter "{name}" that is mandatory for processing this request '
        "is not supplied.",
    )


def _unknown_key() -> EcsApiError:
    return EcsApiError("InvalidAccessKeyId.NotFound", "Specified access key is not found.", 404)


def _mismatch() -> EcsApiError:
    return EcsApiError(
        "SignatureDoesNotMatch",
        "Specified signature is not matched with our calculation.",
    )


def _canonical_query(query: Mapping[str, str]) -> str:
    return "&".join(f"{k}={quote(query[k], safe='~')}" for k in sorted(query))


def verify_v3(
    method: str,
    path: str,
    query: Mapping[str, str],
    headers: Mapping[str, str],
    body: bytes,
    keys: Mapping[str, str],
) -> str:
    """Check an ``ACS3-HMAC-SHA256`` request; return its AccessKey id.

    ``headers`` must have lower-case names.
    """
    auth = headers.get("authorization", "")
    algorithm, _, rest = auth.partition(" ")
    if algorithm != V3_ALGORITHM:
        raise EcsApiError(
            "InvalidAuthorization", f"Authorization algorithm {algorithm!r} is not supported."
        )
    fields = dict(part.split("=", 1) for part in rest.split(",") if "=" in part)
    for name in ("Credential", "SignedHeaders", "Signature"):
        if not fields.get(name):
            raise _missing(f"Authorization.{name}")
    for name in ("x-acs-signature-nonce", "x-acs-date", "x-acs-action", "x-acs-version"):
        if not headers.get(name):
            raise _missing(name)
    secret = keys.get(fields["Credential"])
    if secret is None:
        raise _unknown_key()
    signed = fields["SignedHeaders"].split(";")
    canonical_headers = "".join(f"{h}:{headers.get(h, '').strip()}\n" for h in signed)
    payload = hashlib.sha256(body).hexdigest()
    if headers.get("x-acs-content-sha256", payload) != payload:
        raise _mismatch()
    canonical = "\n".join(
        [method, path or "/", _canonical_query(query), canonical_headers, ";".join(signed), payload]
    )
    to_sign = f"{V3_ALGORITHM}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    expected = hmac.new(secret.encode(), to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, fields["Signature"]):
        raise _mismatch()
    return fields["Credential"]


def _v2_encode(text: str) -> str:
    return quote(text, safe="~")


def verify_v2(method: str, params: Mapping[str, str], keys: Mapping[str, str]) -> str:
    """Check an RPC V2 (``HMAC-SHA1``) signed request; return its AccessKey id."""
    key_id = params.get("AccessKeyId")
    if not key_id:
        raise _missing("AccessKeyId")
    for name in V2_FIELDS:
        if not params.get(name):
            raise _missing(name)
    secret = keys.get(key_id)
    if secret is None:
        raise _unknown_key()
    signed = {k: v for k, v in params.items() if k != "Signature"}
    canonical = "&".join(f"{_v2_encode(k)}={_v2_encode(signed[k])}" for k in sorted(signed))
    to_sign = f"{method}&%2F&{_v2_encode(canonical)}"
    digest = hmac.new(f"{secret}&".encode(), to_sign.encode(), hashlib.sha1).digest()
    if not hmac.compare_digest(base64.b64encode(digest).decode(), params["Signature"]):
        raise _mismatch()
    return key_id
