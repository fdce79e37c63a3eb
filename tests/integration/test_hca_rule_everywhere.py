"""The `rdma/hca` hostNetwork rule holds in every mode: the chart renders it as a
ValidatingAdmissionPolicy where the cluster serves that API (Kubernetes 1.30+, or the API listed;
Local mode included, no controller), as the controller's webhook otherwise, never both; and either
gives every pod of one table the same verdict and the same message.

The policy's CEL runs in cel-python (admission_cel); the webhook path runs the rendered
configuration's rules and CEL, then the controller's handler built from the rendered
config.json. test_webhook_hostnetwork and test_chart_on_apiserver serve the webhook for real.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import helm_python
import pytest
from lightkube.resources.admissionregistration_v1 import (
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
)

from erdma.controller.config import parse_config
from erdma.controller.webhooks import webhook_routes
from erdma.webhook import hostnetwork
from erdma.webhook.review import Handler
from tests.helm_support import ACCESS_KEY, Rendered, merge, render
from tests.integration.admission_cel import policy_denial, webhook_denial
from tests.integration.hca_rule_cases import CASES, SETUPS, Case

API = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
POLICY = "ValidatingAdmissionPolicy"
BINDING = "ValidatingAdmissionPolicyBinding"
HOOKS = "ValidatingWebhookConfiguration"
CONTROLLER = "alibabacloud-erdma-controller"
HOOK = "rdma-hca.erdma.alibabacloud.com"
LOCAL = {"config": {"localERIDiscovery": True}}
REGULAR = merge(ACCESS_KEY, {"config": {"enableWebhook": True}})
#: ValidatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1) from this version on
GA = "1.30.0"
#: a version without it, where only the cluster's list of APIs can say it is served
BEFORE_GA = "1.29.15"


def render_on(values: dict[str, Any], kube_version: str, served: bool) -> Rendered:
    """`helm template --kube-version ... [--api-versions <the policy's API>]`."""
    return render(values, kube_version=kube_version, api_versions=[API] if served else [])


def hca(out: Rendered, kind: str) -> list[dict[str, Any]]:
    """The rule's policy or binding (the chart renders other policies too)."""
    return [o for o in out.all(kind) if o["metadata"]["name"].endswith("-rdma-hca-hostnetwork")]


def shared(setup: str, admission_policy: object) -> dict[str, Any]:
    rdma = {"enabled": True, "admissionPolicy": admission_policy, **SETUPS[setup]}
    return {"sharedRdma": rdma}


@functools.cache
def _policy(setup: str) -> dict[str, Any] | None:
    """The chart's policy, rendered in Local mode (no controller)."""
    policies = hca(render(merge(LOCAL, shared(setup, True))), POLICY)
    return policies[0] if policies else None


@functools.cache
def _webhook(setup: str) -> tuple[dict[str, Any], Handler] | None:
    """The chart's webhook and the controller's handler for it, from Regular mode with the
    policy off."""
    out = render(merge(REGULAR, shared(setup, False)))
    configs = out.all(HOOKS)
    if not configs:
        return None
    (hook,) = [h for h in configs[0]["webhooks"] if h["name"] == HOOK]
    config = parse_config(json.loads(out.config_file(CONTROLLER, "config.json")))
    return hook, webhook_routes(config)[hostnetwork.PATH]


def policy_answer(case: Case) -> str | None:
    policy = _policy(case.setup)
    return None if policy is None else policy_denial(policy, case.request)


def webhook_answer(case: Case) -> str | None:
    found = _webhook(case.setup)
    return None if found is None else webhook_denial(*found, case.request)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_policy_and_webhook_give_every_pod_the_same_answer(case: Case) -> None:
    from_webhook, from_policy = webhook_answer(case), policy_answer(case)
    assert from_policy == from_webhook
    if not case.denied:
        assert from_policy is None
        return
    assert from_policy is not None
    for fragment in case.denied:
        assert fragment in from_policy


def _kinds(out: Rendered) -> set[str]:
    hooks = {h["name"] for c in out.all(HOOKS) for h in c["webhooks"]}
    return {k for k in (POLICY, BINDING) if hca(out, k)} | ({HOOKS} if HOOK in hooks else set())


@pytest.mark.parametrize(
    ("mode", "choice", "kube", "served", "expected"),
    [
        ("regular", "auto", GA, False, {POLICY, BINDING}),
        ("regular", "auto", BEFORE_GA, True, {POLICY, BINDING}),
        ("regular", "auto", BEFORE_GA, False, {HOOKS}),
        ("regular", True, BEFORE_GA, False, {POLICY, BINDING}),
        ("regular", False, GA, True, {HOOKS}),
        ("local", "auto", GA, False, {POLICY, BINDING}),
        ("local", "auto", BEFORE_GA, True, {POLICY, BINDING}),
        ("local", True, BEFORE_GA, False, {POLICY, BINDING}),
        ("local", "auto", BEFORE_GA, False, set()),
        ("local", False, GA, True, set()),
    ],
)
def test_rule_is_the_policy_where_served_else_the_webhook(mode, choice, kube, served, expected):
    values = merge(REGULAR if mode == "regular" else LOCAL, shared("default", choice))
    out = render_on(values, kube, served)
    assert _kinds(out) == expected
    for binding in hca(out, BINDING):
        assert binding["spec"] == {
            "policyName": hca(out, POLICY)[0]["metadata"]["name"],
            "validationActions": ["Deny"],
        }


@pytest.mark.parametrize("choice", ["auto", True])
def test_opt_in_or_no_shared_rdma_renders_no_rule(choice) -> None:
    opt_in = merge(REGULAR, shared("opt-in", choice))
    off = merge(REGULAR, {"sharedRdma": {"enabled": False, "admissionPolicy": choice}})
    for values in (opt_in, off):
        assert _kinds(render_on(values, GA, served=True)) == set()


@pytest.mark.parametrize(
    ("kube", "expected"),
    [
        (BEFORE_GA, {HOOKS}),
        (GA, {POLICY, BINDING}),
        ("v1.31.4-eks-a737599", {POLICY, BINDING}),
        ("1.34.1", {POLICY, BINDING}),
        (None, {POLICY, BINDING}),
    ],
    ids=["1.29", "1.30", "1.31-eks", "1.34", "helm-default"],
)
def test_helm_template_with_default_capabilities_decides_by_the_kube_version(
    kube: str | None, expected: set[str]
) -> None:
    """`helm template` cannot ask the cluster which APIs it serves; from 1.30 on the policy's
    API is part of Kubernetes, so the default `auto` still renders the policy there."""
    out = render(merge(REGULAR, shared("default", "auto")), kube_version=kube)
    assert _kinds(out) == expected


@pytest.mark.parametrize("bad", ["yes", "on", 1])
def test_bad_choice_names_the_key_and_what_is_accepted(bad) -> None:
    with pytest.raises(helm_python.HelmValuesError) as err:
        render(merge(LOCAL, shared("default", bad)))
    assert "/sharedRdma/admissionPolicy" in str(err.value)
    assert "'auto', true, false" in str(err.value)


def test_policy_and_binding_have_only_fields_of_the_v1_schema() -> None:
    """A misspelt field would be dropped by the API server (or refused under strict field
    validation). kube-testserver does not serve these kinds, so `kubectl apply --dry-run=server`
    cannot check them: lightkube's models, generated from Kubernetes' OpenAPI, round-trip every
    field they know."""
    out = render(merge(LOCAL, shared("custom-name", True)))
    (policy,), (binding,) = hca(out, POLICY), hca(out, BINDING)
    assert ValidatingAdmissionPolicy.from_dict(policy).to_dict() == policy
    assert ValidatingAdmissionPolicyBinding.from_dict(binding).to_dict() == binding
