"""Where SMC-R is off, a pod annotated for it gets an admission warning naming smcr.mode (a
ValidatingAdmissionPolicy bound with `Warn`: kubectl prints it, the pod is admitted as it is).
The policy's CEL is evaluated as the API server's policy plugin would (kube-testserver serves no
admission policies: tests/integration/admission_cel.py)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.helm_support import ACCESS_KEY, REPO_ROOT, Rendered, merge, render
from tests.integration.admission_cel import Request, policy_denial

POLICY = "alibabacloud-erdma-smcr-off"
ANNOTATION = "network.alibabacloud.com/erdma-smcr"


def pod(
    annotation: str | None = "true",
    resource: str = "aliyun/erdma",
    *,
    host_network: bool = False,
    init: bool = False,
) -> dict[str, Any]:
    container = {"name": "app", "image": "app", "resources": {"limits": {resource: "1"}}}
    spec: dict[str, Any] = {"hostNetwork": host_network, "containers": [container]}
    if init:
        spec = {
            **spec,
            "containers": [{"name": "app", "image": "app"}],
            "initContainers": [container],
        }
    metadata: dict[str, Any] = {"name": "trainer"}
    if annotation is not None:
        metadata["annotations"] = {ANNOTATION: annotation}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def warning(out: Rendered, obj: dict[str, Any]) -> str | None:
    return policy_denial(out.get("ValidatingAdmissionPolicy", POLICY), Request(obj))


@pytest.fixture(scope="module")
def regular_off() -> Rendered:
    return render(merge(ACCESS_KEY, {"smcr": {"mode": "off"}}))


@pytest.mark.parametrize("spelling", ["true", "True", "TRUE", "t", "T", "1"])
def test_an_annotated_pod_is_warned_naming_the_value(regular_off, spelling):
    said = warning(regular_off, pod(spelling))
    assert said is not None
    assert "smcr.mode=off" in said and "set smcr.mode=webhook or prestart" in said
    assert "Pod trainer" in said


@pytest.mark.parametrize(
    ("kind", "resource", "group"),
    [
        ("Deployment", "deployments", "apps"),
        ("StatefulSet", "statefulsets", "apps"),
        ("Job", "jobs", "batch"),
    ],
)
def test_kubectl_apply_of_a_workload_is_warned_too(regular_off, kind, resource, group):
    """`kubectl apply -f examples/smcr-deployment.yaml` shows it, not only the controller
    that creates the pods."""
    template = pod()
    workload = {
        "apiVersion": f"{group}/v1",
        "kind": kind,
        "metadata": {"name": "trainer"},
        "spec": {"template": {"metadata": template["metadata"], "spec": template["spec"]}},
    }
    said = policy_denial(
        regular_off.get("ValidatingAdmissionPolicy", POLICY),
        Request(workload, kind=kind, resource=resource, group=group),
    )
    assert said is not None and said.startswith("SMC-R is off in this cluster") and kind in said


def test_the_example_deployment_is_warned(regular_off):
    example = yaml.safe_load((REPO_ROOT / "examples" / "smcr-deployment.yaml").read_text())
    request = Request(example, kind="Deployment", resource="deployments", group="apps")
    said = policy_denial(regular_off.get("ValidatingAdmissionPolicy", POLICY), request)
    assert said is not None and "smcr.mode=off" in said


def test_the_policy_only_warns(regular_off):
    binding = regular_off.get("ValidatingAdmissionPolicyBinding", POLICY)
    assert binding["spec"] == {"policyName": POLICY, "validationActions": ["Warn"]}


@pytest.mark.parametrize(
    "obj",
    [
        pod(None),
        pod("false"),
        pod("yes"),  # not a true spelling: neither path turns SMC-R on for it
        pod(resource="rdma/hca"),
        pod(host_network=True),
    ],
    ids=["no annotation", "false", "yes", "no aliyun/erdma", "hostNetwork"],
)
def test_pods_smcr_would_not_touch_get_no_warning(regular_off, obj):
    assert warning(regular_off, obj) is None


def test_an_init_container_asking_for_the_device_counts(regular_off):
    assert warning(regular_off, pod(init=True)) is not None


def test_local_mode_by_default_warns_with_the_local_remedy():
    said = warning(render({"config": {"localERIDiscovery": True}}), pod())
    assert said is not None and "set smcr.mode=prestart (Local mode runs no webhook)" in said


def test_where_smcr_is_on_there_is_no_warning_policy():
    for values in (
        ACCESS_KEY,
        {"config": {"localERIDiscovery": True}, "smcr": {"mode": "prestart"}},
    ):
        assert render(values).find("ValidatingAdmissionPolicy", POLICY) is None


def test_a_cluster_without_admission_policies_gets_none():
    out = render(merge(ACCESS_KEY, {"smcr": {"mode": "off"}}), kube_version="1.29.0")
    assert out.find("ValidatingAdmissionPolicy", POLICY) is None
