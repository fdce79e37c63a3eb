"""The controller logs in with a kubeconfig that embeds its client certificate
(`client-certificate-data`, as kubeadm's admin.conf and kind write it), not only with one that
names certificate files: it used to fall back to the in-cluster ServiceAccount and fail with
"Ran out of valid credentials"."""

from __future__ import annotations

import base64
from pathlib import Path

import kopf
import yaml

from erdma.controller.handlers import login_handler

CERT = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()
KEY = base64.b64encode(
    b"-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n"
).decode()


def test_embedded_client_certificate_is_used(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "admin.conf"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "admin",
                "clusters": [
                    {
                        "name": "k",
                        "cluster": {
                            "server": "https://127.0.0.1:6443",
                            "certificate-authority-data": CERT,
                        },
                    }
                ],
                "users": [
                    {
                        "name": "admin",
                        "user": {"client-certificate-data": CERT, "client-key-data": KEY},
                    }
                ],
                "contexts": [{"name": "admin", "context": {"cluster": "k", "user": "admin"}}],
            }
        )
    )
    info = login_handler(kubeconfig)()
    assert isinstance(info, kopf.ConnectionInfo)
    assert info.server == "https://127.0.0.1:6443"
    assert info.certificate_data == CERT and info.private_key_data == KEY
    assert info.token is None
