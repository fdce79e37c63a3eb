"""The DRA kubelet stubs: method paths, packages and field numbers kubelet uses on the wire."""

from __future__ import annotations

import pytest

from erdma.api.dra.v1 import api_pb2 as v1
from erdma.api.dra.v1beta1 import api_pb2 as v1beta1


def method_paths(module) -> set[str]:
    return {
        f"/{service.full_name}/{method.name}"
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }


@pytest.mark.parametrize(("module", "version"), [(v1, "v1"), (v1beta1, "v1beta1")])
def test_method_paths_are_kubelets(module, version):
    base = f"/k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin"
    assert method_paths(module) == {
        f"{base}/NodePrepareResources",
        f"{base}/NodeUnprepareResources",
    }
    assert module.DESCRIPTOR.package == f"k8s.io.kubelet.pkg.apis.dra.{version}"


@pytest.mark.parametrize("module", [v1, v1beta1])
@pytest.mark.parametrize(
    ("message", "name", "number"),
    [
        ("Claim", "namespace", 1),
        ("Claim", "uid", 2),
        ("Claim", "name", 3),
        ("Device", "request_names", 1),
        ("Device", "pool_name", 2),
        ("Device", "device_name", 3),
        ("Device", "cdi_device_ids", 4),
        ("NodePrepareResourceResponse", "devices", 1),
        ("NodePrepareResourceResponse", "error", 2),
        ("NodeUnprepareResourceResponse", "error", 1),
        ("NodePrepareResourcesRequest", "claims", 1),
        ("NodePrepareResourcesResponse", "claims", 1),
    ],
)
def test_field_numbers_match_upstream(module, message, name, number):
    assert getattr(module, message).DESCRIPTOR.fields_by_name[name].number == number


def test_the_two_versions_are_the_same_on_the_wire():
    answer = v1.NodePrepareResourcesResponse()
    answer.claims["uid-1"].devices.add(
        request_names=["nic"], pool_name="node", device_name="erdma-0", cdi_device_ids=["k=v"]
    )
    old = v1beta1.NodePrepareResourcesResponse.FromString(answer.SerializeToString())
    assert old.claims["uid-1"].devices[0].cdi_device_ids == ["k=v"]


def test_v1_device_carries_the_share_id_of_consumable_capacity():
    """Upstream k8s.io/kubelet/pkg/apis/dra/v1 adds `optional string share_id = 5` to Device
    (1.34, consumable capacity); v1beta1 has no such field."""
    field = v1.Device.DESCRIPTOR.fields_by_name["share_id"]
    assert field.number == 5 and field.has_presence
    assert "share_id" not in v1beta1.Device.DESCRIPTOR.fields_by_name
