"""Facts the controller reads from Node objects: readiness, the instance a Node stands for.

A Node names its ECS instance in ``spec.providerID`` (the ACK form ``<region>.<i-...>``) or,
failing that, through its InternalIP, which equals the instance's private IP.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lightkube.resources.core_v1 import Node

from erdma.controller.cloud import Instance
from erdma.kube import crd
from erdma.kube.client import LIST_PAGE_SIZE, KubeApi


def node_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def instance_id_from_provider(provider_id: str) -> str | None:
    """``<region>.<i-...>`` (the ACK form) gives the instance id; anything else gives None."""
    parts = provider_id.split(".")
    if len(parts) == 2 and crd.INSTANCE_ID_RE.match(parts[1]):
        return parts[1]
    return None


def internal_ips(node: Mapping[str, Any]) -> list[str]:
    """The Node's InternalIP addresses, in the order the kubelet reported them."""
    addresses = (node.get("status") or {}).get("addresses") or []
    return [
        str(a["address"]) for a in addresses if a.get("type") == "InternalIP" and a.get("address")
    ]


def internal_ip(node: Mapping[str, Any]) -> str | None:
    """The Node's first InternalIP, used to look its instance up when providerID names none."""
    return next(iter(internal_ips(node)), None)


@dataclass(frozen=True)
class NodeIndex:
    """Which instances have a Node: by providerID, or by an InternalIP equal to theirs.

    A Node that is being deleted stands for nothing any more.
    """

    instance_ids: frozenset[str]
    ips: frozenset[str]

    @classmethod
    def of(cls, nodes: Iterable[Mapping[str, Any]]) -> NodeIndex:
        ids: set[str] = set()
        ips: set[str] = set()
        for node in nodes:
            _note(node, ids, ips)
        return cls(frozenset(ids), frozenset(ips))

    def has(self, instance_id: str, instance: Instance | None = None) -> bool:
        """Whether some Node stands for this instance (pass ``instance`` to match by IP too)."""
        return instance_id in self.instance_ids or (
            instance is not None and bool(instance.private_ip) and instance.private_ip in self.ips
        )


def _note(node: Mapping[str, Any], ids: set[str], ips: set[str]) -> None:
    """Add what the Node stands for (its instance id, its InternalIPs) unless it is deleting."""
    if (node.get("metadata") or {}).get("deletionTimestamp"):
        return
    provider = str((node.get("spec") or {}).get("providerID") or "")
    if (found := instance_id_from_provider(provider)) is not None:
        ids.add(found)
    ips.update(internal_ips(node))


async def node_index(kube: KubeApi) -> NodeIndex:
    """Every Node now in the cluster, read a page at a time and reduced to what the index
    keeps as it comes, so a sweep never holds every Node of a large cluster as a model."""
    ids: set[str] = set()
    ips: set[str] = set()
    async for node in kube.client.list(Node, chunk_size=LIST_PAGE_SIZE):
        _note(node.to_dict(), ids, ips)
    return NodeIndex(frozenset(ids), frozenset(ips))
