"""What a release of the reference chart (AliyunContainerService/alibabacloud-erdma-controller,
deploy/helm) holds, written from its documented behaviour (shared/reference/erdma-behaviour.md
§10), not copied: its values.yaml keys at their defaults, and the selectors of its DaemonSet and
Deployment, which a release upgraded to this chart keeps (selectors are immutable)."""

from __future__ import annotations

from typing import Any

#: every key the reference values.yaml sets, at its default
VALUES: dict[str, Any] = {
    "controller": {
        "replicaCount": 2,
        "image": {
            "repository": "registry.aliyuncs.com/erdma/controller",
            "pullPolicy": "Always",
            "tag": "latest",
        },
        "imagePullSecrets": [],
        "nameOverride": "",
        "fullnameOverride": "",
        "nodeSelector": {},
        "affinity": {},
    },
    "agent": {
        "image": {
            "repository": "registry.aliyuncs.com/erdma/agent",
            "pullPolicy": "Always",
            "tag": "latest",
        },
        "preferDriver": "",
        "allocateAllDevices": False,
        "jumboFrameMTU": 8500,
        "exposedLocalERIs": ["i-XXX erdma_0/erdma_1"],
        "imagePullSecrets": [],
        "nameOverride": "",
        "fullnameOverride": "",
    },
    "serviceAccount": {"create": True, "annotations": {}, "name": ""},
    "podAnnotations": {},
    "nodeSelector": {},
    "tolerations": [{"operator": "Exists"}],
    "affinity": {},
    "webhookFailurePolicy": "Ignore",
    "webhookTimeoutSeconds": 10,
    "config": {
        "region": "",
        "manageNonOwnedENIs": True,
        "clusterDomain": "",
        "enableDevicePlugin": True,
        "enableWebhook": False,
        "enableInitContainerInject": True,
        "smcInitImage": "",
        "localERIDiscovery": False,
    },
    "credentials": {"type": "", "accessKeyID": "", "accessKeySecret": ""},
}

#: the object names the reference chart hard-codes (this chart's defaults give the same)
AGENT = "alibabacloud-erdma-agent"
CONTROLLER = "alibabacloud-erdma-controller"


def selector(release: str, tier: str) -> dict[str, str]:
    """spec.selector.matchLabels of the reference DaemonSet (tier agent) or Deployment (tier
    controller): its chart name, the release, and the tier."""
    return {
        "app.kubernetes.io/name": "alibabacloud-erdma-controller",
        "app.kubernetes.io/instance": release,
        "tier": tier,
    }


def workload(kind: str, name: str, namespace: str, release: str, tier: str) -> dict[str, Any]:
    """A DaemonSet or Deployment shaped as the reference chart renders it (the fields that
    matter to an upgrade: name, selector, pod labels, one container)."""
    labels = selector(release, tier)
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**labels, "app.kubernetes.io/managed-by": "Helm"},
        },
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "alibabacloud-erdma-controller",
                            "image": f"registry.aliyuncs.com/erdma/{tier}:latest",
                        }
                    ]
                },
            },
        },
    }
