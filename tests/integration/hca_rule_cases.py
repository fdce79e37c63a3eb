"""The `rdma/hca` hostNetwork rule as a table: pods, requests and the verdict each must get, from
the controller's webhook and from the chart's ValidatingAdmissionPolicy alike.

Pods are as the API server hands them to admission: validated, quantities in canonical form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.integration.admission_cel import Request

HCA = {"rdma/hca": "1"}
ROCE = "example.com/roce"

#: id -> the sharedRdma values of the chart under test
SETUPS: dict[str, dict[str, Any]] = {
    "default": {},
    "custom-name": {"resourceName": ROCE},
    "opt-in": {"nonHostNetworkRdma": True},
}


def container(
    name: str, limits: dict[str, str] | None = None, requests: dict[str, str] | None = None
) -> dict[str, Any]:
    resources = {k: v for k, v in (("limits", limits), ("requests", requests)) if v is not None}
    return {"name": name, "image": "train:1", **({"resources": resources} if resources else {})}


def pod(
    *containers: dict[str, Any],
    init: tuple[dict[str, Any], ...] = (),
    host_network: bool | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod with a plain `sidecar` container first, then ``containers``."""
    spec: dict[str, Any] = {"containers": [container("sidecar"), *containers]}
    if init:
        spec["initContainers"] = list(init)
    if host_network is not None:
        spec["hostNetwork"] = host_network
    meta = metadata if metadata is not None else {"name": "trainer"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


@dataclass(frozen=True)
class Case:
    """``request`` under the chart values ``setup``; ``denied`` holds the fragments the
    denial must contain (empty: admitted)."""

    id: str
    request: Request
    denied: tuple[str, ...] = ()
    setup: str = "default"


_FIX = ("not hostNetwork", "spec.hostNetwork: true", "nonHostNetworkRdma: true", "IPv6")
WORKER_HCA = container("worker", limits=HCA)

CASES: tuple[Case, ...] = (
    Case(
        "limits-hostNetwork-false",
        Request(pod(WORKER_HCA, host_network=False)),
        ("pod ml/trainer: container 'worker' requests rdma/hca", *_FIX),
    ),
    Case(
        "limits-hostNetwork-absent",
        Request(pod(WORKER_HCA)),
        ("pod ml/trainer: container 'worker' requests rdma/hca",),
    ),
    Case("hostNetwork-true", Request(pod(WORKER_HCA, host_network=True))),
    Case(
        "requests-only",
        Request(pod(container("worker", requests={"rdma/hca": "2"}))),
        ("container 'worker' requests rdma/hca",),
    ),
    Case(
        "init-container",
        Request(pod(init=(WORKER_HCA,))),
        ("container 'worker' requests rdma/hca",),
    ),
    Case("init-container-hostNetwork", Request(pod(init=(WORKER_HCA,), host_network=True))),
    Case(
        "two-containers-named-in-order",
        Request(pod(container("b", limits=HCA), init=(container("a", requests=HCA),))),
        ("container 'a' requests rdma/hca, container 'b' requests rdma/hca",),
    ),
    Case(
        "zero-amount",
        Request(pod(container("w", limits={"rdma/hca": "0"}, requests={"rdma/hca": "0"}))),
    ),
    Case("no-resources", Request(pod())),
    Case("cpu-memory", Request(pod(container("w", limits={"cpu": "2", "memory": "1Gi"})))),
    Case("aliyun-erdma", Request(pod(container("w", limits={"aliyun/erdma": "1"})))),
    Case("gpu", Request(pod(container("w", limits={"nvidia.com/gpu": "8"})))),
    Case("other-name-unknown-by-default", Request(pod(container("w", limits={ROCE: "1"})))),
    Case(
        "configured-name",
        Request(pod(container("w", limits={ROCE: "1"}))),
        (f"container 'w' requests {ROCE}",),
        setup="custom-name",
    ),
    Case("default-name-not-configured", Request(pod(WORKER_HCA)), setup="custom-name"),
    Case("opt-in-hostNetwork-false", Request(pod(WORKER_HCA, host_network=False)), setup="opt-in"),
    Case("opt-in-init-container", Request(pod(init=(WORKER_HCA,))), setup="opt-in"),
    Case(
        "generateName",
        Request(pod(WORKER_HCA, metadata={"generateName": "job-abc-"})),
        ("pod ml/job-abc-<generated>: container 'worker'",),
    ),
    # hostNetwork and extended resources cannot change on an existing pod: only CREATE is judged
    Case("update", Request(pod(WORKER_HCA), operation="UPDATE")),
    Case("delete", Request(pod(WORKER_HCA), operation="DELETE")),
    Case(
        "other-kind", Request({"metadata": {"name": "cm"}}, kind="ConfigMap", resource="configmaps")
    ),
)
