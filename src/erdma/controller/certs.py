"""Webhook certificate material: generating and inspecting a self-signed CA and server certificate.

Pure ``cryptography`` code with no Kubernetes in it; ``webhook_certs`` stores what this makes in
the shared Secret and decides when to call it.

Keys are ECDSA P-256: security comparable to RSA-3072, generated in under a millisecond (RSA-2048
takes tens of milliseconds, RSA-4096 from a quarter second to seconds: the prime search varies),
cheaper TLS handshakes, and accepted by the API server's Go TLS client.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=3650)
RENEW_BEFORE = datetime.timedelta(days=30)
SECRET_KEYS = ("tls.crt", "tls.key", "ca.crt")
_PEM = serialization.Encoding.PEM


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def dns_names(service: str, namespace: str, cluster_domain: str) -> list[str]:
    """The names the API server may use for the webhook Service."""
    base = f"{service}.{namespace}.svc"
    return [service, f"{service}.{namespace}", base, f"{base}.{cluster_domain}"]


@dataclass(frozen=True)
class CertBundle:
    """PEM bytes as stored under the Secret's keys."""

    tls_crt: bytes
    tls_key: bytes
    ca_crt: bytes

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str] | None) -> CertBundle:
        raw = {k: base64.b64decode((data or {}).get(k) or "") for k in SECRET_KEYS}
        return cls(raw["tls.crt"], raw["tls.key"], raw["ca.crt"])

    def secret_data(self) -> dict[str, str]:
        values = (self.tls_crt, self.tls_key, self.ca_crt)
        return {k: base64.b64encode(v).decode() for k, v in zip(SECRET_KEYS, values, strict=True)}

    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.tls_crt)

    def cas(self) -> list[x509.Certificate]:
        return x509.load_pem_x509_certificates(self.ca_crt)


def generate(
    service: str,
    namespace: str,
    cluster_domain: str = "cluster.local",
    validity: datetime.timedelta = VALIDITY,
    keep_cas: bytes = b"",
) -> CertBundle:
    """A fresh CA and server certificate; ``keep_cas`` (PEM) is appended to ``ca.crt``."""
    now = _now()
    start, end = now - datetime.timedelta(hours=1), now + validity
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{service}-webhook-ca")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = dns_names(service, namespace, cluster_domain)
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[2])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        _PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return CertBundle(leaf.public_bytes(_PEM), key_pem, ca.public_bytes(_PEM) + keep_cas)


def _usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def problem(bundle: CertBundle, names: list[str], renew_before: datetime.timedelta) -> str | None:
    """Why ``bundle`` must be replaced, or None when it can be served as it is."""
    missing = [
        k
        for k, v in zip(SECRET_KEYS, (bundle.tls_crt, bundle.tls_key, bundle.ca_crt), strict=True)
        if not v
    ]
    if missing:
        return f"key(s) {', '.join(missing)} missing or empty"
    try:
        cert, cas = bundle.certificate(), bundle.cas()
        key = serialization.load_pem_private_key(bundle.tls_key, password=None)
    except ValueError as exc:
        return f"not valid PEM: {exc}"
    if key.public_key() != cert.public_key():
        return "tls.key does not belong to tls.crt"
    if not any(_issued_by(cert, ca) for ca in cas):
        return "tls.crt is not signed by a CA in ca.crt"
    try:
        have = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        present = set(have.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        present = set()
    lacking = [n for n in names if n not in present]
    if lacking:
        return f"tls.crt does not cover {', '.join(lacking)}"
    left = cert.not_valid_after_utc - _now()
    if left < renew_before:
        return (
            f"tls.crt expires {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC, within the "
            f"{renew_before.days}-day renewal margin"
        )
    return None


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def still_valid_cas(bundle: CertBundle) -> bytes:
    """The first still-valid CA of an old bundle, to keep trusting it across a rotation."""
    try:
        cas = bundle.cas()
    except ValueError:
        return b""
    valid = [ca for ca in cas if ca.not_valid_after_utc > _now()]
    return valid[0].public_bytes(_PEM) if valid else b""
