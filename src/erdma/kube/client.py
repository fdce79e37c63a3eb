"""Kubernetes API access for the controller and the agent: Nodes and ERdmaDevice objects.

lightkube (async, typed models for built-ins, generic resources for CRDs, small dependency set)
does the HTTP. Everything above this module handles plain dicts, the same shape kopf hands to
handlers and ``erdma.kube.crd`` builds and parses, so reconcile logic has one data model.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from erdma.kube import crd

ERdmaDeviceResource = create_global_resource(crd.GROUP, crd.VERSION, crd.KIND, crd.PLURAL)
#: objects per page of a list (client-go's informer default): a large cluster never arrives as
#: one response, parsed and held whole
LIST_PAGE_SIZE = 500
FIELD_MANAGER = "erdma-controller"


def kube_config(kubeconfig: str | Path | None = None) -> KubeConfig:
    """An explicit kubeconfig file, else $KUBECONFIG / ~/.kube/config, else in-cluster."""
    if kubeconfig:
        return KubeConfig.from_file(kubeconfig)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        return KubeConfig.from_service_account()
    return KubeConfig.from_env()


def new_client(kubeconfig: str | Path | None = None) -> AsyncClient:
    return AsyncClient(kube_config(kubeconfig), field_manager=FIELD_MANAGER)


def is_not_found(exc: ApiError) -> bool:
    return exc.status.code == 404


def _as_dict(obj: Any) -> dict[str, Any]:
    return dict(obj.to_dict()) if hasattr(obj, "to_dict") else dict(obj)


class KubeApi:
    """The few calls the controller and agent make, on plain dicts."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def close(self) -> None:
        await self.client.close()

    async def get_node(self, name: str) -> dict[str, Any] | None:
        try:
            return _as_dict(await self.client.get(Node, name))
        except ApiError as exc:
            if is_not_found(exc):
                return None
            raise

    async def get_device(self, name: str) -> dict[str, Any] | None:
        try:
            return _as_dict(await self.client.get(ERdmaDeviceResource, name))
        except ApiError as exc:
            if is_not_found(exc):
                return None
            raise

    async def iter_devices(
        self, labels: Mapping[str, str] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Every ERdmaDevice, read ``LIST_PAGE_SIZE`` at a time."""
        found = self.client.list(
            ERdmaDeviceResource, labels=dict(labels or {}), chunk_size=LIST_PAGE_SIZE
        )
        async for obj in found:
            yield _as_dict(obj)

    async def list_devices(self, labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        return [obj async for obj in self.iter_devices(labels)]

    async def create_device(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return _as_dict(await self.client.create(ERdmaDeviceResource.from_dict(dict(obj))))

    async def patch_device(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """JSON merge patch of the main resource (spec, labels)."""
        got = await self.client.patch(
            ERdmaDeviceResource, name, dict(patch), patch_type=PatchType.MERGE
        )
        return _as_dict(got)

    async def patch_device_status(self, name: str, status: Mapping[str, Any]) -> None:
        await self.client.patch(
            ERdmaDeviceResource.Status,
            name,
            {"status": dict(status)},
            patch_type=PatchType.MERGE,
        )

    async def drop_finalizer(self, obj: Mapping[str, Any]) -> None:
        """Remove our finalizer, guarded by resourceVersion so a concurrent edit is not lost."""
        meta = obj["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != crd.FINALIZER]
        if finalizers == list(meta.get("finalizers") or []):
            return
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
        try:
            await self.client.patch(
                ERdmaDeviceResource, meta["name"], patch, patch_type=PatchType.MERGE
            )
        except ApiError as exc:
            if not is_not_found(exc):
                raise

    async def delete_device(self, name: str) -> None:
        try:
            await self.client.delete(ERdmaDeviceResource, name)
        except ApiError as exc:
            if not is_not_found(exc):
                raise

    async def watch_device(self, name: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """(event type, object) for the ERdmaDevice ``name``, starting with its current state."""
        stream = self.client.watch(ERdmaDeviceResource, fields={"metadata.name": name})
        async for kind, obj in stream:
            yield kind, _as_dict(obj)
