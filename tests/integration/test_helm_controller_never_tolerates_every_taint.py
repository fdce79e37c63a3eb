"""The reference chart gave its top-level `tolerations: [{operator: Exists}]` to the agent and the
controller alike, so a migrated values file carries it. Here the node agents get it (they must
run on every node) but the controller's pods do not: tolerating every taint would put the
controller on tainted GPU nodes and keep it on unreachable ones, where its webhooks and ERI
work stall. Helm's NOTES say so, and how to give it to the controller on purpose
(`controller.tolerations`)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helm_support import ACCESS_KEY, Rendered, merge, render
from tests.integration import reference_chart as ref
from tests.integration.helm_cases import AGENT, CONTROLLER

EVERY_TAINT = {"operator": "Exists"}
OWN = [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
#: the reference values file after docs/migration.md's step 3
MIGRATED = merge(
    ref.VALUES,
    {"agent": {"image": {"repository": "docker.io/erdma-k8s/erdma"}}},
    {"controller": {"image": {"repository": ""}}},
    ACCESS_KEY,
)
CONTROLLER_PODS = [("Deployment", CONTROLLER), ("Job", f"{CONTROLLER}-drop-finalizers")]
WARNING = "the controller does not get it"


def tolerations(out: Rendered, kind: str, name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = out.get(kind, name)["spec"]["template"]["spec"]["tolerations"]
    return found


@pytest.mark.parametrize(
    "blanket", [EVERY_TAINT, {"operator": "Exists", "effect": "NoExecute"}], ids=["all", "effect"]
)
def test_migrated_tolerate_everything_reaches_the_agent_not_the_controller(
    blanket: dict[str, str],
) -> None:
    dedicated = {"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}
    out = render(merge(MIGRATED, {"tolerations": [blanket, dedicated]}))
    assert blanket in tolerations(out, "DaemonSet", AGENT)
    for kind, name in CONTROLLER_PODS:
        assert tolerations(out, kind, name) == [*OWN, dedicated], name


def test_the_reference_values_file_is_warned_about_in_the_notes() -> None:
    notes = render(MIGRATED).notes
    (line,) = [line for line in notes.splitlines() if WARNING in line]
    assert "tolerations: [{operator: Exists}] tolerates every taint" in line, line
    assert "set controller.tolerations" in line, line


def test_the_controller_tolerates_every_taint_only_when_its_own_list_says_so() -> None:
    out = render(merge(MIGRATED, {"controller": {"tolerations": [EVERY_TAINT]}}))
    for kind, name in CONTROLLER_PODS:
        assert tolerations(out, kind, name) == [EVERY_TAINT], name
    assert WARNING not in out.notes


@pytest.mark.parametrize(
    "values",
    [ACCESS_KEY, merge(MIGRATED, {"config": {"localERIDiscovery": True}})],
    ids=["defaults", "local-mode-no-controller"],
)
def test_no_warning_where_no_controller_is_left_out(values: dict[str, Any]) -> None:
    assert WARNING not in render(values).notes
