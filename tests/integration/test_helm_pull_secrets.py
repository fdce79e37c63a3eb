"""Registry credentials reach every pod the chart runs. Every program runs the agent's image
unless `controller.image` names another, so the top-level `imagePullSecrets` and
`agent.imagePullSecrets` go to every pod (the node DaemonSets, the controller, the uninstall
hook Job), the controller's pods add `controller.imagePullSecrets`, and each Secret is named
once, in that order. A pod left without them stays in ImagePullBackOff on a private registry,
and a hook Job that cannot pull its image holds `helm uninstall`."""

from __future__ import annotations

from typing import Any

import pytest
from helm_python import HelmValuesError

from tests.helm_support import ACCESS_KEY, Rendered, merge, render
from tests.integration.helm_cases import AGENT, CONTROLLER, SHARED

#: every pod of a Regular-mode release with shared RDMA: kind/name
EVERY_POD = {
    f"DaemonSet/{AGENT}",
    f"DaemonSet/{SHARED}",
    f"Deployment/{CONTROLLER}",
    f"Job/{CONTROLLER}-drop-finalizers",
}
CONTROLLER_PODS = {f"Deployment/{CONTROLLER}", f"Job/{CONTROLLER}-drop-finalizers"}
ALL_PODS = merge(ACCESS_KEY, {"sharedRdma": {"enabled": True}})


def pull_secrets(out: Rendered) -> dict[str, list[str]]:
    """kind/name of every object with a pod template (hooks included) -> its pull secrets."""
    found: dict[str, list[str]] = {}
    for obj in out.objects:
        pod: dict[str, Any] | None = obj.get("spec", {}).get("template", {}).get("spec")
        if pod is not None:
            names = [s["name"] for s in pod.get("imagePullSecrets") or []]
            found[f"{obj['kind']}/{obj['metadata']['name']}"] = names
    assert set(found) >= EVERY_POD, f"pods rendered: {sorted(found)}"
    return found


def secrets(*names: str) -> list[dict[str, str]]:
    return [{"name": n} for n in names]


def test_top_level_and_agent_pull_secrets_reach_every_pod() -> None:
    out = render(
        merge(
            ALL_PODS,
            {
                "imagePullSecrets": secrets("mirror"),
                "agent": {"imagePullSecrets": secrets("agent-registry")},
            },
        )
    )
    for pod, names in pull_secrets(out).items():
        assert names == ["mirror", "agent-registry"], f'{pod}: include "erdma.imagePullSecrets"'


def test_controller_pods_add_their_own_and_each_secret_is_named_once() -> None:
    out = render(
        merge(
            ALL_PODS,
            {
                "imagePullSecrets": secrets("mirror"),
                "agent": {"imagePullSecrets": secrets("agent-registry", "mirror")},
                "controller": {"imagePullSecrets": secrets("controller-registry", "mirror")},
            },
        )
    )
    for pod, names in pull_secrets(out).items():
        want = ["mirror", "agent-registry"]
        if pod in CONTROLLER_PODS:
            want.append("controller-registry")
        assert names == want, f'{pod}: include "erdma.imagePullSecrets"'


def test_a_reference_values_file_with_only_agent_pull_secrets_pulls_the_controller_too() -> None:
    """The reference chart gave agent.imagePullSecrets to the agent only; here the controller
    runs the agent's image, so it needs them as well."""
    out = render(merge(ALL_PODS, {"agent": {"imagePullSecrets": secrets("regcred")}}))
    assert pull_secrets(out)[f"Deployment/{CONTROLLER}"] == ["regcred"]


def test_without_pull_secrets_no_pod_names_any() -> None:
    assert all(names == [] for names in pull_secrets(render(ALL_PODS)).values())


@pytest.mark.parametrize("key", ["imagePullSecrets", "agent.imagePullSecrets"])
def test_a_secret_given_as_a_bare_name_is_refused_naming_the_key(key: str) -> None:
    values: dict[str, Any] = {"imagePullSecrets": ["regcred"]}
    if key.startswith("agent."):
        values = {"agent": values}
    with pytest.raises(HelmValuesError) as refused:
        render(merge(ALL_PODS, values))
    message = str(refused.value)
    assert f"/{key.replace('.', '/')}/0" in message, message
    assert "object" in message, message
