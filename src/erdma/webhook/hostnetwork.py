"""Validating handler: shared RDMA resources (`rdma/hca`) only for hostNetwork pods, by default.

A pod that is not hostNetwork gets `rdma/hca` from the device plugin but cannot use RDMA unless
non-hostNetwork RDMA is enabled, which in turn needs the Lingjun compute network to run IPv6.
Without this check such a pod is scheduled, starts, and fails later inside the application;
refusing it at admission puts the reason and the fix in front of whoever ran `kubectl apply`.

Only CREATE is judged: `hostNetwork` and extended resources cannot change on a running pod.
The object a validating webhook sees has already passed API validation, so quantities are in
canonical form (a zero request reads `0`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from erdma.api.names import SHARED_RESOURCE
from erdma.webhook.pod import Pod, read_pod
from erdma.webhook.review import AdmissionRequest, Verdict

PATH = "/validate-rdma-hca"
DEFAULT_RESOURCES: tuple[str, ...] = (SHARED_RESOURCE,)
_RESOURCE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9][-A-Za-z0-9_.]*$")


def _check_names(resources: Sequence[str]) -> tuple[str, ...]:
    if isinstance(resources, str) or not resources:
        raise ValueError(
            f"sharedResourceNames must be a non-empty list of resource names, got {resources!r}; "
            f"e.g. {list(DEFAULT_RESOURCES)!r}"
        )
    for name in resources:
        if not isinstance(name, str) or not _RESOURCE_NAME.match(name):
            raise ValueError(
                f"sharedResourceNames: {name!r} is not an extended resource name; "
                "accepted: <domain>/<name>, e.g. 'rdma/hca'"
            )
    return tuple(resources)


def _requesters(pod: Pod, resources: Sequence[str]) -> list[tuple[str, str]]:
    """(container name, resource) for every container asking for a positive amount."""
    return [(c.name, r) for c in pod.all_containers() for r in resources if c.asks_for(r)]


def _pod_name(request: AdmissionRequest, pod: Pod) -> str:
    name = pod.name or (f"{pod.generate_name}<generated>" if pod.generate_name else "<unnamed>")
    return f"{request.namespace}/{name}" if request.namespace else name


def _describe(found: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"container {c!r} requests {r}" for c, r in found)


@dataclass(frozen=True)
class HostNetworkRdmaValidator:
    """The handler; `non_host_network_rdma` mirrors the agent's `nonHostNetworkRdma`."""

    resources: tuple[str, ...] = DEFAULT_RESOURCES
    non_host_network_rdma: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "resources", _check_names(self.resources))

    def __call__(self, request: AdmissionRequest) -> Verdict:
        if self.non_host_network_rdma:
            return Verdict()
        if request.operation != "CREATE" or request.kind not in ("", "Pod"):
            return Verdict()
        pod = read_pod(request.object)
        if pod.host_network:
            return Verdict()
        found = _requesters(pod, self.resources)
        if not found:
            return Verdict()
        return Verdict(
            allowed=False,
            message=(
                f"pod {_pod_name(request, pod)}: {_describe(found)}, but the pod is not "
                "hostNetwork and RDMA for non-hostNetwork pods is disabled on this cluster, so "
                "it could not use RDMA. Fix: set spec.hostNetwork: true, or enable "
                "non-hostNetwork RDMA (nonHostNetworkRdma: true), which needs a Lingjun compute "
                "network that uses IPv6 (chosen when the Lingjun cluster was created)."
            ),
        )
