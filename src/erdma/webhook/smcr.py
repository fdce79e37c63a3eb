"""Mutating handler: give SMC-R pods an init container that runs `erdma smcr-init`.

Injected only when the pod is created, requests `aliyun/erdma` (so the device plugin hands the
init container `SMCR_PNET`), carries `network.alibabacloud.com/erdma-smcr` with a true value,
and is not hostNetwork (its namespace is the node's: tcp2smc there would convert every TCP
socket on the node). For such pods a value that is neither true nor false is refused at
admission, so the mistake shows at `kubectl apply` rather than as a pod that silently uses TCP;
the PreStartContainer path fails the same pods the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from erdma.api.names import ERDMA_RESOURCE, SMCR_ANNOTATION
from erdma.api.smcr import SmcrError, parse_smcr_annotation
from erdma.webhook.pod import read_pod
from erdma.webhook.review import AdmissionRequest, Verdict

PATH = "/mutate-pods-smcr"
#: the reference controller's path for the same webhook, served too so that a
#: MutatingWebhookConfiguration carried over from it keeps working
REFERENCE_PATH = "/mutating"
CONTAINER_NAME = "smcr-init"


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
        pod = read_pod(request.object)
        if pod.host_network or not pod.requests_resource(ERDMA_RESOURCE):
            return Verdict()
        try:
            wanted = parse_smcr_annotation(pod.annotations.get(SMCR_ANNOTATION))
        except SmcrError as exc:
            return Verdict(allowed=False, message=str(exc))
        if not wanted:
            return Verdict()
        if any(c.name == CONTAINER_NAME for c in pod.init_containers):
            return Verdict()  # re-invocation: already injected
        op: dict[str, Any]
        if pod.init_containers:
            op = {"op": "add", "path": "/spec/initContainers/-", "value": self.container()}
        else:
            op = {"op": "add", "path": "/spec/initContainers", "value": [self.container()]}
        return Verdict(patch=(op,))
