"""Pods for the real kubelet and what their containers report.

kube-testserver does no defaulting and (without the scheduler) no binding, so each pod carries
what kube-apiserver and kube-scheduler would add (the kubelet tool README lists the fields).
A container reports what it sees on stdout, which the kubelet writes to its pod log: every
/dev/infiniband node with its numbers, then its environment, then `READY`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.kubelet_support import Api, KubeletNode, wait_for

NAMESPACE = "default"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
#: busybox stat prints the numbers in hex; the env goes after a marker line
PROBE = (
    'for f in /dev/infiniband/*; do [ -e "$f" ] && stat -c \'DEV %n %t %T\' "$f"; done; '
    "echo ENV; env; echo READY; exec sleep 3600"
)


def unique(prefix: str) -> str:
    """A pod or claim name no other test (or earlier session) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def pod_manifest(
    name: str,
    node: str | None,
    limits: Mapping[str, str] | None = None,
    *,
    annotations: Mapping[str, str] | None = None,
    host_network: bool = True,
    claims: Sequence[tuple[str, str]] = (),
    from_template: bool = False,
) -> dict[str, Any]:
    """A busybox pod running PROBE; ``node`` None leaves binding to the real scheduler;
    ``claims`` are (name in the pod, ResourceClaim name), or (name in the pod,
    ResourceClaimTemplate name) with ``from_template``."""
    resources: dict[str, Any] = {}
    if limits:
        resources = {"limits": dict(limits), "requests": dict(limits)}
    if claims:
        resources["claims"] = [{"name": n} for n, _ in claims]
    spec: dict[str, Any] = {
        "hostNetwork": host_network,
        "dnsPolicy": "Default",
        "enableServiceLinks": False,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "securityContext": {},
        "containers": [
            {
                "name": "c",
                "image": "docker.io/local/busybox:e",
                "imagePullPolicy": "Never",
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "command": ["/bin/sh", "-c", PROBE],
                "resources": resources,
            }
        ],
    }
    if node is None:
        spec["schedulerName"] = "default-scheduler"
    else:
        spec["nodeName"] = node
    if claims:
        key = "resourceClaimTemplateName" if from_template else "resourceClaimName"
        spec["resourceClaims"] = [{"name": n, key: c} for n, c in claims]
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@dataclass(frozen=True)
class Seen:
    """What one container reported about itself."""

    devices: dict[str, tuple[int, int]]
    env: dict[str, str]


def parse_probe(lines: Sequence[str]) -> Seen:
    devices: dict[str, tuple[int, int]] = {}
    env: dict[str, str] = {}
    in_env = False
    for line in lines:
        if line == "ENV":
            in_env = True
        elif line == "READY":
            break
        elif in_env and "=" in line:
            key, value = line.split("=", 1)
            env[key] = value
        elif line.startswith("DEV "):
            _, path, major, minor = line.split()
            devices[path] = (int(major, 16), int(minor, 16))
    return Seen(devices, env)


def pod_log_lines(node: KubeletNode, pod: Mapping[str, Any]) -> list[str]:
    """The container's stdout lines from the kubelet's CRI-format log (`TIME STREAM TAG TEXT`)."""
    meta = pod["metadata"]
    log = Path(node.env["KUBELET_POD_LOGS_DIR"]) / (
        f"{meta['namespace']}_{meta['name']}_{meta['uid']}/c/0.log"
    )
    if not log.exists():
        return []
    return [line.split(" ", 3)[3] for line in log.read_text().splitlines() if line.count(" ") >= 3]


def phase(api: Api, name: str) -> str | None:
    pod = api.get(f"{PODS}/{name}")
    return pod.get("status", {}).get("phase") if pod else None


def run_pod(
    api: Api, node: KubeletNode, manifest: Mapping[str, Any]
) -> tuple[dict[str, Any], Seen]:
    """Create the pod, wait until it runs and its container reported; (pod, what it saw)."""
    name = manifest["metadata"]["name"]
    api.create(PODS, manifest)

    def reported() -> tuple[dict[str, Any], list[str]] | None:
        pod = api.get(f"{PODS}/{name}")
        if pod is None or pod.get("status", {}).get("phase") in ("Failed", "Succeeded"):
            raise AssertionError(f"pod {name} ended: {pod and pod.get('status')}")
        lines = pod_log_lines(node, pod)
        return (pod, lines) if "READY" in lines else None

    pod, lines = wait_for(reported, f"pod {name} running and reporting")
    return pod, parse_probe(lines)


def container_waiting(api: Api, name: str) -> dict[str, Any] | None:
    """The container's `state.waiting` (reason, message) once the kubelet reported one."""
    pod = api.get(f"{PODS}/{name}")
    for status in (pod or {}).get("status", {}).get("containerStatuses", []):
        waiting = status.get("state", {}).get("waiting")
        if waiting and waiting.get("message"):
            return dict(waiting)
    return None


def delete_pod(api: Api, name: str) -> None:
    api.delete(f"{PODS}/{name}")
