"""The `rdma/hca` hostNetwork rule, served over real HTTPS with AdmissionReview v1 bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from erdma.webhook import hostnetwork, smcr
from erdma.webhook.hostnetwork import HostNetworkRdmaValidator
from erdma.webhook.review import Handler

pytest_plugins = ["tests.integration.webhook_support"]
PERMISSIVE = "/validate-rdma-hca-permissive"
CUSTOM = "/validate-custom"
UID = "9e3c1a52-1f0b-4c55-9d8e-2b7f0c4a6d11"


@pytest.fixture
def webhook_routes() -> dict[str, Handler]:
    """The routes as the controller would mount them (plus variants)."""
    return {
        smcr.PATH: smcr.SmcrInjector("registry.example/erdma:1.0"),
        hostnetwork.PATH: HostNetworkRdmaValidator(),
        PERMISSIVE: HostNetworkRdmaValidator(non_host_network_rdma=True),
        CUSTOM: HostNetworkRdmaValidator(resources=("rdma/hca", "example.com/roce")),
    }


@pytest.fixture
def webhook_path() -> str:
    return hostnetwork.PATH


def pod(
    host_network: bool | None = None,
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    init: bool = False,
    name: str = "trainer",
) -> dict[str, Any]:
    """A pod whose one container (or one init container, with `init`) has these resources."""
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    worker = {"name": "worker", "image": "train:1", "resources": resources}
    plain = {"name": "sidecar", "image": "busybox"}
    spec: dict[str, Any] = {"containers": [plain] if init else [plain, worker]}
    if init:
        spec["initContainers"] = [worker]
    if host_network is not None:
        spec["hostNetwork"] = host_network
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def review(obj: dict[str, Any], operation: str = "CREATE", kind: str = "Pod") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": {"group": "", "version": "v1", "kind": kind},
            "operation": operation,
            "namespace": "ml",
            "object": obj,
        },
    }


HCA = {"rdma/hca": "1"}


async def verdict(post, obj: dict[str, Any], path: str = hostnetwork.PATH, **kw) -> dict[str, Any]:
    status, body = await post(review(obj, **kw), path)
    assert status == 200, body
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    response = body["response"]
    assert response["uid"] == UID
    assert "patch" not in response  # validating: never mutates
    return response


@pytest.mark.parametrize("host_network", [False, None], ids=["hostNetwork-false", "absent"])
async def test_non_host_network_pod_with_hca_is_denied_with_reason_and_fix(post, host_network):
    response = await verdict(post, pod(host_network=host_network, limits=HCA))
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    message = response["status"]["message"]
    assert "pod ml/trainer" in message
    assert "container 'worker' requests rdma/hca" in message
    assert "not hostNetwork" in message
    assert "spec.hostNetwork: true" in message
    assert "nonHostNetworkRdma: true" in message and "IPv6" in message


async def test_host_network_pod_with_hca_is_allowed(post):
    response = await verdict(post, pod(host_network=True, limits=HCA))
    assert response == {"uid": UID, "allowed": True}


@pytest.mark.parametrize("host_network", [True, False, None], ids=["true", "false", "absent"])
async def test_option_on_allows_every_pod(post, host_network):
    response = await verdict(post, pod(host_network=host_network, limits=HCA), PERMISSIVE)
    assert response["allowed"] is True


async def test_init_container_request_is_judged_too(post):
    response = await verdict(post, pod(limits=HCA, init=True))
    assert response["allowed"] is False
    assert "container 'worker' requests rdma/hca" in response["status"]["message"]
    assert (await verdict(post, pod(host_network=True, limits=HCA, init=True)))["allowed"]


async def test_requests_only_counts(post):
    response = await verdict(post, pod(requests={"rdma/hca": "2"}))
    assert response["allowed"] is False


async def test_zero_quantity_is_no_request(post):
    assert (await verdict(post, pod(limits={"rdma/hca": "0"}, requests={"rdma/hca": "0"})))[
        "allowed"
    ]


@pytest.mark.parametrize(
    "limits",
    [None, {"cpu": "2", "memory": "1Gi"}, {"aliyun/erdma": "1"}, {"nvidia.com/gpu": "8"}],
    ids=["no-resources", "cpu-memory", "aliyun-erdma", "gpu"],
)
async def test_pods_without_the_resource_are_allowed(post, limits):
    assert (await verdict(post, pod(limits=limits)))["allowed"]


async def test_configured_resource_names(post):
    denied = await verdict(post, pod(limits={"example.com/roce": "1"}), CUSTOM)
    assert denied["allowed"] is False
    assert "requests example.com/roce" in denied["status"]["message"]
    # the default handler does not know that name
    assert (await verdict(post, pod(limits={"example.com/roce": "1"})))["allowed"]


async def test_generate_name_pod_is_named_in_the_message(post):
    obj = pod(limits=HCA)
    obj["metadata"] = {"generateName": "job-abc-"}
    response = await verdict(post, obj)
    assert "pod ml/job-abc-<generated>" in response["status"]["message"]


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
async def test_only_create_is_judged(post, operation):
    assert (await verdict(post, pod(limits=HCA), operation=operation))["allowed"]


async def test_other_kinds_are_allowed(post):
    assert (await verdict(post, {"metadata": {"name": "cm"}}, kind="ConfigMap"))["allowed"]


async def test_smcr_route_is_served_beside_it(post):
    """Both handlers share one server; the SMC-R route still answers on its own path."""
    obj = pod(limits={"aliyun/erdma": "1"})
    obj["metadata"]["annotations"] = {"network.alibabacloud.com/erdma-smcr": "true"}
    status, body = await post(review(obj), smcr.PATH)
    assert status == 200 and body["response"]["allowed"] is True
    assert body["response"]["patchType"] == "JSONPatch"


@pytest.mark.parametrize(
    "body, expected",
    [
        (b"{not json", "body is not JSON"),
        (b"[]", "JSON object"),
        (json.dumps({"apiVersion": "v1", "kind": "Pod"}).encode(), "expected"),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
            "request",
        ),
    ],
    ids=["not-json", "not-object", "wrong-kind", "no-request"],
)
async def test_malformed_review_is_400(post, body, expected):
    status, reply = await post(body)
    assert status == 400
    assert expected in reply["error"]


@pytest.mark.parametrize(
    "names, fragment",
    [
        ((), "non-empty list"),
        ("rdma/hca", "non-empty list"),
        (("hca",), "'hca' is not an extended resource name"),
        (("rdma/hca", "Bad Name/x"), "'Bad Name/x'"),
    ],
)
def test_bad_resource_names_are_rejected_at_construction(names, fragment):
    with pytest.raises(ValueError, match="sharedResourceNames") as caught:
        HostNetworkRdmaValidator(resources=names)
    assert fragment in str(caught.value)
