"""Which instance a Node stands for: what decides whether ERIs of a gone Node may be deleted."""

from __future__ import annotations

from erdma.controller.cloud import Instance
from erdma.controller.nodes import NodeIndex, instance_id_from_provider, internal_ip


def node(provider: str = "", ip: str = "", deleting: bool = False) -> dict:
    meta: dict = {"name": "n"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    addresses = [{"type": "Hostname", "address": "h"}] + (
        [{"type": "InternalIP", "address": ip}] if ip else []
    )
    return {"metadata": meta, "spec": {"providerID": provider}, "status": {"addresses": addresses}}


def instance(instance_id: str, ip: str) -> Instance:
    return Instance(instance_id, "cn-hangzhou", "t", "z", "vpc", "vsw", ("sg",), ip, "eni-p")


def test_provider_id_in_the_ack_form_names_the_instance() -> None:
    assert instance_id_from_provider("cn-hangzhou.i-2ze0abc") == "i-2ze0abc"
    for other in ("", "i-2ze0abc", "cn-hangzhou.node-1", "a.b.i-2ze0abc"):
        assert instance_id_from_provider(other) is None
    assert internal_ip(node(ip="10.0.0.7")) == "10.0.0.7" and internal_ip(node()) is None


def test_an_instance_has_a_node_by_provider_id_or_by_its_private_ip() -> None:
    index = NodeIndex.of([node("cn-hangzhou.i-a"), node(ip="10.0.0.9")])
    assert index.has("i-a")
    assert not index.has("i-b")  # without the instance's record its IP cannot be compared
    assert index.has("i-b", instance("i-b", "10.0.0.9"))
    assert not index.has("i-c", instance("i-c", "10.0.0.10"))
    assert not index.has("i-d", instance("i-d", ""))


def test_a_node_being_deleted_stands_for_nothing() -> None:
    index = NodeIndex.of([node("cn-hangzhou.i-a", "10.0.0.9", deleting=True)])
    assert not index.has("i-a", instance("i-a", "10.0.0.9"))
