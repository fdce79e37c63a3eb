"""HTTPS for the ECS emulator: a throw-away CA, a certificate for 127.0.0.1 signed by it, and
a CA bundle for the client.

The bundle is certifi's CAs (what the SDK trusts in production) with this CA added, so a
client loading it does the work it does against real ECS. ``trusted_as_certifi`` points the
SDK's default trust (``certifi.where()``) at it, since ``EcsSettings`` has no CA setting: the
production client is the one under test, unchanged.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import certifi
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALIDITY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class EmulatorTls:
    """The files of one emulator's TLS: its certificate and key, and the client's CA bundle."""

    ca_bundle: Path
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        """The emulator's side (``EcsEmulator(tls=...)``)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_tls(directory: Path) -> EmulatorTls:
    """A new CA and a certificate for 127.0.0.1 and localhost, written under ``directory``."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("ECS emulator test CA"))
        .issuer_name(_name("ECS emulator test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    files = EmulatorTls(directory / "ca-bundle.pem", directory / "ecs.pem", directory / "ecs.key")
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    files.ca_bundle.write_bytes(Path(certifi.where()).read_bytes() + b"\n" + ca_pem)
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files


@contextmanager
def trusted_as_certifi(ca_bundle: Path) -> Iterator[None]:
    """``certifi.where()`` names ``ca_bundle`` inside the block."""
    with mock.patch.object(certifi, "where", return_value=str(ca_bundle)):
        yield
