"""pytest plugin: a kube-testserver that also serves the webhook configuration kinds.

kube-testserver does not serve admissionregistration.k8s.io. This server gets CRDs of the same
group, kind and plural, so the real GET / JSON-patch / 404 paths of the caBundle code run
through a real API server; the built-in schema is not enforced, which these tests do not rely on.
Register with ``pytest_plugins = ["tests.integration.webhook_config_support"]``; test modules
also import ``webhook_config`` from it, hence PYTEST_DONT_REWRITE (it holds no assertions).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, TypeVar, cast

import pytest
from lightkube.resources.admissionregistration_v1 import (
    MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration,
)

from tests.fakes.kubeapi import KubeApiServer, KubeApiUnavailable, install_crd

NS = "kube-system"
W = TypeVar("W", MutatingWebhookConfiguration, ValidatingWebhookConfiguration)

STAND_IN_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.admissionregistration.k8s.io
  annotations:
    api-approved.kubernetes.io: "unapproved, test stand-in for the built-in kind"
spec:
  group: admissionregistration.k8s.io
  scope: Cluster
  names: {{plural: {plural}, singular: {singular}, kind: {kind}, listKind: {kind}List}}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"""


@pytest.fixture(scope="module")
def webhook_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApiServer]:
    try:
        server = KubeApiServer.start()
    except KubeApiUnavailable as exc:
        pytest.skip(f"real Kubernetes API server unavailable: {exc}")
    folder = tmp_path_factory.mktemp("crds")
    with server:
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            plural = kind.lower() + "s"
            manifest = folder / f"{plural}.yaml"
            manifest.write_text(
                STAND_IN_CRD.format(plural=plural, singular=kind.lower(), kind=kind)
            )
            asyncio.run(install_crd(server.kubeconfig, manifest))
        yield server


def webhook_config(kind: type[W], name: str, hooks: list[tuple[str, str | None]]) -> W:
    """A webhook configuration whose hooks have these caBundles (None: no caBundle key)."""
    webhooks = []
    for hook, ca in hooks:
        client_config: dict[str, Any] = {"service": {"name": name, "namespace": NS, "path": "/x"}}
        if ca is not None:
            client_config["caBundle"] = ca
        webhooks.append(
            {
                "name": hook,
                "clientConfig": client_config,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
            }
        )
    obj = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind.__name__,
        "metadata": {"name": name},
        "webhooks": webhooks,
    }
    return cast(W, kind.from_dict(obj))
