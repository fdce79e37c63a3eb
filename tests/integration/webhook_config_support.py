"""Webhook configurations for the caBundle tests: the real built-in kinds of kube-testserver.

kube-testserver serves admissionregistration.k8s.io/v1, so the controller's GET / JSON-patch /
404 paths run against the real kinds, their defaults and validation (names fully qualified,
``sideEffects`` and ``admissionReviewVersions`` required). Imported by the test modules, hence
PYTEST_DONT_REWRITE (it holds no assertions).
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

from lightkube.resources.admissionregistration_v1 import (
    MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration,
)

NS = "kube-system"
W = TypeVar("W", MutatingWebhookConfiguration, ValidatingWebhookConfiguration)


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
