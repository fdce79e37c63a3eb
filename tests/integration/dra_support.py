"""Shared helpers for the DRA tests: claims as the scheduler leaves them, a driver on a fixture."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice
from lightkube.types import PatchType

from erdma.agent.health import device_health
from erdma.dra import DraConfig, DraDriver
from erdma.dra.names import DRIVER_NAME
from erdma.host.devices import scan
from erdma.sim import fakehost


def allocation(node: str, results: list[tuple[str, str]], driver: str = DRIVER_NAME) -> dict:
    """`status` as kube-scheduler writes it for (request, device) results on `node`'s pool."""
    return {
        "allocation": {
            "devices": {
                "results": [
                    {"request": request, "driver": driver, "pool": node, "device": device}
                    for request, device in results
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }


async def allocated_claim(
    k8s: AsyncClient, node: str, results: list[dict[str, Any]]
) -> tuple[str, str, str]:
    """A claim of one NIC created on the API server and allocated on `node` with ``results``,
    as kube-scheduler leaves it; (namespace, uid, name)."""
    name = f"nic-{uuid.uuid4().hex[:6]}"
    request = {"name": "nic", "exactly": {"deviceClassName": DRIVER_NAME}}
    metadata = {"name": name, "namespace": "default"}
    body: Any = ResourceClaim.from_dict(
        {"metadata": metadata, "spec": {"devices": {"requests": [request]}}}
    )
    uid = (await k8s.create(body)).metadata.uid
    status = allocation(node, [])
    status["allocation"]["devices"]["results"] = results
    patch = {"status": status}
    await k8s.patch(
        ResourceClaim.Status, name, patch, namespace="default", patch_type=PatchType.MERGE
    )
    return "default", str(uid), name


def claim(name: str, node: str, results: list[tuple[str, str]], ns: str = "default") -> dict:
    return {
        "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4())},
        "status": allocation(node, results),
    }


class ClaimStore:
    """Claims by (namespace, name), standing in for the API server; counts reads."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.reads = 0

    def add(self, obj: dict[str, Any]) -> tuple[str, str, str]:
        meta = obj["metadata"]
        self.claims[(meta["namespace"], meta["name"])] = obj
        return meta["namespace"], meta["uid"], meta["name"]

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        return self.claims.get((namespace, name))


def new_driver(
    root: Path,
    host: fakehost.FakeHost,
    *,
    client: Any = None,
    store: ClaimStore | None = None,
    node: str = "node-a",
    config: DraConfig | None = None,
    mode: str = "default",
    **kw: Any,
) -> DraDriver:
    driver = DraDriver(
        config or DraConfig(enabled=True),
        node_name=node,
        host_root=host.root,
        kubelet_dir=root / "kubelet",
        cdi_dir=root / "cdi",
        client=client,
        health=device_health,
        mode=mode,
        get_claim=store.get if store is not None else None,
        **kw,
    )
    driver.publish(scan(host.root))
    return driver


async def slices_of(k8s: AsyncClient, node: str, driver: str = DRIVER_NAME) -> list[dict]:
    """``node``'s ResourceSlices of ``driver`` as the API server stores them."""
    fields: dict[str, Any] = {"spec.nodeName": node, "spec.driver": driver}
    return [s.to_dict() async for s in k8s.list(ResourceSlice, fields=fields)]


def by_name(slice_: dict) -> dict[str, dict]:
    """A slice's devices by name."""
    return {d["name"]: d for d in slice_["spec"].get("devices") or []}
