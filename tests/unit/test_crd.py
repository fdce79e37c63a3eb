"""ERdmaDevice objects: what the controller writes is what the agent reads; bad fields are named."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from erdma.kube import crd

MANIFEST = (
    Path(__file__).resolve().parents[2] / "deploy/crds/erdmadevices.network.alibabacloud.com.yaml"
)

ERI0 = crd.DeviceInfo("eni-2ze0a", "00:16:3e:2f:37:75", "i-2ze1", network_card_index=0)
ERI1 = crd.DeviceInfo("eni-2ze0b", "00:16:3e:2f:31:11", "i-2ze1", network_card_index=1)


def built() -> dict:
    return crd.build("node-a", "uid-1", "i-2ze1", [ERI1, ERI0], jumbo_frame=True)


def test_built_object_names_node_labels_owner_and_finalizer():
    obj = built()
    assert obj["apiVersion"] == "network.alibabacloud.com/v1"
    assert obj["kind"] == "ERdmaDevice"
    meta = obj["metadata"]
    assert meta["name"] == "node-a"
    assert meta["labels"] == {
        "alibabacloud.com/instance-id": "i-2ze1",
        "alibabacloud.com/nodename": "node-a",
    }
    assert meta["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "uid-1"}
    ]
    assert meta["finalizers"] == ["network.alibabacloud.com/erdma-controller"]


def test_spec_uses_reference_field_names_sorted_by_card():
    spec = built()["spec"]
    assert spec["jumboFrame"] is True
    assert [d["networkCardIndex"] for d in spec["devices"]] == [0, 1]
    assert spec["devices"][0] == {
        "id": "eni-2ze0a",
        "mac": "00:16:3e:2f:37:75",
        "instanceID": "i-2ze1",
        "networkCardIndex": 0,
        "isPrimaryENI": False,
        "queuePair": 0,
    }


def test_round_trip_with_status():
    obj = built()
    obj["status"] = crd.status_body(
        [crd.DeviceStatus("eni-2ze0a", "Ready"), crd.DeviceStatus("eni-2ze0b", "Pending", "x")]
    )
    dev = crd.parse(obj)
    assert dev.name == "node-a"
    assert dev.instance_id == "i-2ze1"
    assert dev.devices == (ERI0, ERI1)
    assert dev.jumbo_frame is True
    assert obj["status"]["ready"] == "1/2"
    assert not dev.all_ready
    obj["status"] = crd.status_body([crd.DeviceStatus(d.id, "Ready") for d in dev.devices])
    assert crd.parse(obj).all_ready


def test_no_devices_is_never_ready():
    obj = crd.build("n", "u", "i-1", [], jumbo_frame=False)
    assert not crd.parse(obj).all_ready


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("spec", "devices", 0, "mac"), "00:16:3E:2F:37:75", "spec.devices[0].mac: '00:16:3E"),
        (("spec", "devices", 0, "mac"), "0016.3e2f.3775", "lower-case colon MAC"),
        (("spec", "devices", 1, "id"), "erdma_0", "spec.devices[1].id: 'erdma_0'"),
        (("spec", "devices", 0, "instanceID"), "ecs-1", "expected an instance id"),
        (("spec", "devices", 0, "networkCardIndex"), -1, "not a non-negative integer"),
        (("spec", "devices", 0, "isPrimaryENI"), "yes", "isPrimaryENI: 'yes' is not true"),
        (("spec", "jumboFrame"), "true", "spec.jumboFrame: 'true'"),
        (("spec", "devices"), {}, "spec.devices: {} is not a list"),
    ],
)
def test_bad_spec_fields_are_named_with_value(path, value, expected):
    obj = copy.deepcopy(built())
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(crd.CrdError) as err:
        crd.parse(obj)
    assert expected in str(err.value)
    assert "ERdmaDevice node-a" in str(err.value)


def test_bad_status_lists_accepted_states():
    obj = built()
    obj["status"] = {"devices": [{"id": "eni-2ze0a", "status": "Attached"}]}
    with pytest.raises(
        crd.CrdError,
        match=r"status.devices\[0\].status: 'Attached' is not one of Pending, Ready, Failed",
    ):
        crd.parse(obj)


def test_build_rejects_bad_instance_id():
    with pytest.raises(crd.CrdError, match="'node-a' is not valid; expected i-"):
        crd.build("n", "u", "node-a", [], jumbo_frame=False)


def test_manifest_matches_model():
    """The CRD schema accepts exactly the field names and patterns the model writes."""
    doc = yaml.safe_load(MANIFEST.read_text())
    assert doc["metadata"]["name"] == crd.CRD_NAME
    assert doc["spec"]["scope"] == "Cluster"
    version = doc["spec"]["versions"][0]
    assert version["name"] == crd.VERSION and version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Instance",
        "Devices",
        "Ready",
        "Age",
    ]
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    item = schema["spec"]["properties"]["devices"]["items"]["properties"]
    assert set(item) == set(ERI0.to_dict())
    assert item["mac"]["pattern"] == crd.MAC_RE.pattern
    assert item["id"]["pattern"] == crd.ENI_ID_RE.pattern
    assert item["instanceID"]["pattern"] == crd.INSTANCE_ID_RE.pattern
    status_item = schema["status"]["properties"]["devices"]["items"]["properties"]
    assert status_item["status"]["enum"] == list(crd.STATES)
    for name, prop in {**item, **status_item}.items():
        assert prop.get("description"), f"field {name} has no description"
