"""The controller's credentials as the chart renders them: an AccessKey from the user's own Secret
(never in Helm values), ACK's add-on STS token, RRSA; each taken by the controller's credential
code as the pod would see it."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from erdma.controller.providers.ecs.credentials import CredentialSettings, build_credential_client
from tests.helm_support import Rendered, render
from tests.integration.helm_cases import CONTROLLER

CREDENTIAL = f"{CONTROLLER}-credential"


def _pod(out: Rendered) -> dict[str, Any]:
    spec: dict[str, Any] = out.get("Deployment", CONTROLLER)["spec"]["template"]["spec"]
    return spec


def test_an_existing_secret_keeps_the_access_key_out_of_the_release() -> None:
    out = render({"credentials": {"type": "access_key", "existingSecret": "erdma-ak"}})
    credential = out.secret_json(CREDENTIAL, "credential.json")
    assert credential == {"type": "access_key"}
    env = {e["name"]: e for e in out.container("Deployment", CONTROLLER)["env"]}
    refs = {
        name: env[name]["valueFrom"]["secretKeyRef"]
        for name in ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET")
    }
    assert refs == {
        "ALIBABA_CLOUD_ACCESS_KEY_ID": {"name": "erdma-ak", "key": "accessKeyID"},
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": {"name": "erdma-ak", "key": "accessKeySecret"},
    }
    # the controller, given the Secret's keys through that environment, signs with them
    pod_env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAI-x", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "s3"}
    client = build_credential_client(CredentialSettings.from_mapping(credential), env=pod_env)
    assert client.get_credential().access_key_id == "LTAI-x"


def test_ram_role_sts_mounts_acks_addon_token_where_the_controller_reads_it() -> None:
    out = render({"credentials": {"type": "ram_role_sts"}}, namespace="kube-system")
    settings = CredentialSettings.from_mapping(out.secret_json(CREDENTIAL, "credential.json"))
    assert settings.type == "ram_role_sts"
    pod = _pod(out)
    (volume,) = [v for v in pod["volumes"] if v["name"] == "sts-token"]
    assert volume["secret"] == {
        "secretName": "addon.network.token",
        "items": [{"key": "addon.token.config", "path": "token-config"}],
    }
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "sts-token"]
    path = Path(mount["mountPath"]) / volume["secret"]["items"][0]["path"]
    assert str(path) == settings.sts_token_file and mount["readOnly"] is True
    assert "secretKeyRef" not in str(pod["containers"][0]["env"])


def test_other_types_mount_no_token_and_pass_no_access_key() -> None:
    out = render({"credentials": {"type": "oidc_role_arn", "roleName": "erdma"}})
    pod = _pod(out)
    assert all(v["name"] != "sts-token" for v in pod["volumes"])
    assert "ALIBABA_CLOUD_ACCESS_KEY_ID" not in str(pod["containers"][0]["env"])
    encoded = out.get("Secret", CREDENTIAL)["data"]["credential.json"]
    assert base64.b64decode(encoded) == b'{"roleName":"erdma","type":"oidc_role_arn"}'
