"""The chart's RBAC as a reviewer reads it: every rule says which code uses it, and the only
Secret the controller may touch is its webhook certificate, which the chart creates itself.

Which verbs the programs really use is tests/integration/test_rbac_used.py's job.
"""

from __future__ import annotations

import re

import pytest

from tests.helm_support import CHART_DIR, Rendered
from tests.integration.helm_cases import CONTROLLER

pytest_plugins = ["tests.integration.conftest_helm"]
TEMPLATES = CHART_DIR / "templates"
SECRET = f"{CONTROLLER}-webhook-cert"


def rbac_templates() -> list[str]:
    found = [
        p.name
        for p in sorted(TEMPLATES.glob("*.yaml"))
        if re.search(r"^kind: (Cluster)?Role$", p.read_text(), re.MULTILINE)
    ]
    assert {"rbac.yaml", "dra-rbac.yaml"} <= set(found)
    return found


@pytest.mark.parametrize("template", rbac_templates())
def test_every_rule_is_preceded_by_a_comment(template: str) -> None:
    lines = (TEMPLATES / template).read_text().splitlines()
    bare = []
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("- apiGroups:"):
            continue
        above = [x.strip() for x in lines[:i] if not x.strip().startswith("{{")]
        if not above or not above[-1].startswith("#"):
            bare.append(f"{template}:{i + 1}: {line.strip()}")
    assert not bare, f"rules without a comment naming the code that uses them: {bare}"


def test_secrets_only_for_webhooks_named_and_never_created(
    case: tuple[str, Rendered],
) -> None:
    _, out = case
    webhooks = bool(
        out.all("MutatingWebhookConfiguration") + out.all("ValidatingWebhookConfiguration")
    )
    rules = [
        rule
        for role in out.all("Role") + out.all("ClusterRole")
        for rule in role["rules"]
        if "secrets" in rule["resources"]
    ]
    if not webhooks:
        assert rules == []
        assert out.find("Secret", SECRET) is None
        return
    assert rules == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [SECRET],
            "verbs": ["get", "update"],
        }
    ]
    secret = out.get("Secret", SECRET)
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["data"] == {"tls.crt": "", "tls.key": ""}  # the controller fills it
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_no_rule_grants_create_on_a_nameable_resource_it_could_scope(
    case: tuple[str, Rendered],
) -> None:
    """`create` cannot be limited by resourceNames; it is granted only where the object's name
    is not known in advance (Events, ERdmaDevices, ResourceSlices) or for the Lease."""
    _, out = case
    allowed = {"events", "erdmadevices", "resourceslices", "leases"}
    for role in out.all("Role") + out.all("ClusterRole"):
        for rule in role["rules"]:
            if "create" in rule["verbs"]:
                assert set(rule["resources"]) <= allowed, (role["metadata"]["name"], rule)
                assert "resourceNames" not in rule, (role["metadata"]["name"], rule)
