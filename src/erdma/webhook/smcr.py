"""Mutating handler: give SMC-R pods an init container that runs `erdma smcr-init`.

Injected only when the pod is created, requests `aliyun/erdma` (so the device plugin hands the
init container `SMCR_PNET`), carries `network.alibabacloud.com/erdma-smcr` with a true value,
and is not hostNetwork (its namespace is the node's: tcp2smc there would convert every TCP
socket on the node). For such pods a value that is neither true nor false is refused at
admission, so the mistake shows at `kubectl apply` rather than as a pod that silently uses TCP;
the PreStartContainer path fails the same pods the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from erdma.api.names import ERDMA_RESOURCE, SMCR_ANNOTATION
from erdma.api.smcr import SmcrError, parse_smcr_annotation
from erdma.webhook.review import AdmissionRequest, Verdict

PATH = "/mutate-pods-smcr"
CONTAINER_NAME = "smcr-init"


def _containers(spec: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    for key in ("initContainers", "containers"):
        yield from spec.get(key) or ()


def _quantity_positive(value: Any) -> bool:
    text = str(value).strip()
    return text not in ("", "0") and not text.startswith("-")


def requests_resource(spec: Mapping[str, Any], resource: str = ERDMA_RESOURCE) -> bool:
    """Whether any container or init container asks for `resource` (limits or requests)."""
    for container in _containers(spec):
        resources = container.get("resources") or {}
        for section in ("limits", "requests"):
            amounts = resources.get(section) or {}
            if resource in amounts and _quantity_positive(amounts[resource]):
                return True
    return False


@dataclass(frozen=True)
class SmcrInjector:
    """The handler; `image` holds the `erdma` CLI (normally the agent's image)."""

    image: str
    pull_policy: str = "IfNotPresent"
    command: tuple[str, ...] = ("erdma", "smcr-init")

    def container(self) -> dict[str, Any]:
        one = {ERDMA_RESOURCE: "1"}
        spec: dict[str, Any] = {
            "name": CONTAINER_NAME,
            "image": self.image,
            "imagePullPolicy": self.pull_policy,
            "command": list(self.command),
            "resources": {"limits": dict(one), "requests": dict(one)},
            # /proc/sys is read-only in unprivileged containers and root-owned; tcp2smc lives
            # there, and the image's default user is not root
            "securityContext": {"privileged": True, "runAsUser": 0},
        }
        return spec

    def __call__(self, request: AdmissionRequest) -> Verdict:
        if request.operation != "CREATE" or request.kind not in ("", "Pod"):
            return Verdict()
        pod = request.object
        metadata = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        if spec.get("hostNetwork") or not requests_resource(spec):
            return Verdict()
        try:
            wanted = parse_smcr_annotation((metadata.get("annotations") or {}).get(SMCR_ANNOTATION))
        except SmcrError as exc:
            return Verdict(allowed=False, message=str(exc))
        if not wanted:
            return Verdict()
        existing = spec.get("initContainers") or []
        if any(c.get("name") == CONTAINER_NAME for c in existing):
            return Verdict()  # re-invocation: already injected
        op: dict[str, Any]
        if existing:
            op = {"op": "add", "path": "/spec/initContainers/-", "value": self.container()}
        else:
            op = {"op": "add", "path": "/spec/initContainers", "value": [self.container()]}
        return Verdict(patch=(op,))
