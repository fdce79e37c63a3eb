"""The `rdma/hca` hostNetwork rule holds in every mode: the chart renders it as a
ValidatingAdmissionPolicy where the cluster serves that API (Local mode included, no controller),
as the controller's webhook otherwise, never both; and either gives every pod of one table the
same verdict and the same message.

The policy's CEL runs in cel-python (admission_cel); the webhook path runs the rendered
configuration's rules and CEL, then the controller's handler built from the rendered
config.json. test_webhook_hostnetwork and test_chart_on_apiserver serve the webhook for real.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import helm_python
import pytest
import yaml
from helm_python import _native
from lightkube.resources.admissionregistration_v1 import (
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
)

from erdma.controller.config import parse_config
from erdma.controller.webhooks import webhook_routes
from erdma.webhook import hostnetwork
from erdma.webhook.review import Handler
from tests.helm_support import ACCESS_KEY, CHART_DIR, RELEASE, Rendered, merge, render
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


def render_on(values: dict[str, Any], api_versions: Sequence[str] = ()) -> Rendered:
    """`helm template --api-versions ...`: a cluster that serves ``api_versions``. Chart.render
    has no such argument; the helm_render it wraps takes `api_versions`, as Helm's own option."""
    opts = {"name": RELEASE, "namespace": "kube-system", "is_install": True,
            "api_versions": list(api_versions)}  # fmt: skip
    with helm_python.Chart.load(CHART_DIR) as chart:
        text = _native.call_string("helm_render", chart._raw(), json.dumps(values),
                                   json.dumps(opts))  # fmt: skip
    docs = [d for t in json.loads(text).values() for d in yaml.safe_load_all(t) if d]
    return Rendered(tuple(docs), "kube-system")


def shared(setup: str, admission_policy: object) -> dict[str, Any]:
    rdma = {"enabled": True, "admissionPolicy": admission_policy, **SETUPS[setup]}
    return {"sharedRdma": rdma}


@functools.cache
def _policy(setup: str) -> dict[str, Any] | None:
    """The chart's policy, rendered in Local mode (no controller)."""
    policies = render(merge(LOCAL, shared(setup, True))).all(POLICY)
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
    return {k for k in (POLICY, BINDING) if out.all(k)} | ({HOOKS} if HOOK in hooks else set())


@pytest.mark.parametrize(
    ("mode", "choice", "served", "expected"),
    [
        ("regular", "auto", True, {POLICY, BINDING}),
        ("regular", "auto", False, {HOOKS}),
        ("regular", True, False, {POLICY, BINDING}),
        ("regular", False, True, {HOOKS}),
        ("local", "auto", True, {POLICY, BINDING}),
        ("local", True, False, {POLICY, BINDING}),
        ("local", "auto", False, set()),
        ("local", False, True, set()),
    ],
)
def test_rule_is_the_policy_where_served_else_the_webhook(mode, choice, served, expected):
    values = merge(REGULAR if mode == "regular" else LOCAL, shared("default", choice))
    out = render_on(values, [API] if served else [])
    assert _kinds(out) == expected
    for binding in out.all(BINDING):
        assert binding["spec"] == {"policyName": out.all(POLICY)[0]["metadata"]["name"],
                                   "validationActions": ["Deny"]}  # fmt: skip


@pytest.mark.parametrize("choice", ["auto", True])
def test_opt_in_or_no_shared_rdma_renders_no_rule(choice) -> None:
    opt_in = merge(REGULAR, shared("opt-in", choice))
    off = merge(REGULAR, {"sharedRdma": {"enabled": False, "admissionPolicy": choice}})
    for values in (opt_in, off):
        assert _kinds(render_on(values, [API])) == set()


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
    (policy,), (binding,) = out.all(POLICY), out.all(BINDING)
    assert ValidatingAdmissionPolicy.from_dict(policy).to_dict() == policy
    assert ValidatingAdmissionPolicyBinding.from_dict(binding).to_dict() == binding
