"""Where the chart's pods may run (priority classes, tolerations, spread) and which image each
runs: a fully qualified default that one value moves, digests pinned as repository@digest."""

from __future__ import annotations

import json
from typing import Any

import yaml

from tests.helm_support import ACCESS_KEY, CHART_DIR, Rendered, chart_defaults, merge, render
from tests.integration.helm_cases import AGENT, CONTROLLER, SHARED

DIGEST = "sha256:" + "ab" * 32


def _pod(out: Rendered, kind: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = out.get(kind, name)["spec"]["template"]["spec"]
    return spec


def _smc_init_image(out: Rendered) -> str:
    image: str = json.loads(out.config_file(CONTROLLER, "config.json"))["smcInitImage"]
    return image


def test_node_agents_are_node_critical_and_tolerate_every_taint() -> None:
    out = render(merge(ACCESS_KEY, {"sharedRdma": {"enabled": True}}))
    for kind, name in (("DaemonSet", AGENT), ("DaemonSet", SHARED)):
        pod = _pod(out, kind, name)
        assert pod["priorityClassName"] == "system-node-critical"
        assert pod["tolerations"] == [{"operator": "Exists"}]


def test_controller_has_its_own_tolerations_priority_and_spreads_its_replicas() -> None:
    pod = _pod(render(ACCESS_KEY), "Deployment", CONTROLLER)
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["tolerations"] == [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"][
        "app.kubernetes.io/component"
    ] == ("controller")


def test_placement_values_override_and_top_level_tolerations_are_added() -> None:
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    dedicated = {"key": "dedicated", "operator": "Equal", "value": "rdma", "effect": "NoExecute"}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "role", "operator": "In", "values": ["infra"]}]}
                ]
            }
        }
    }
    out = render(
        merge(
            ACCESS_KEY,
            {
                "agent": {"tolerations": [gpu], "priorityClassName": ""},
                "controller": {
                    "tolerations": [],
                    "priorityClassName": "erdma-high",
                    "affinity": affinity,
                },
                "tolerations": [dedicated],
            },
        )
    )
    agent, controller = _pod(out, "DaemonSet", AGENT), _pod(out, "Deployment", CONTROLLER)
    assert agent["tolerations"] == [gpu, dedicated] and "priorityClassName" not in agent
    assert controller["tolerations"] == [dedicated]
    assert controller["priorityClassName"] == "erdma-high"
    assert controller["affinity"] == affinity


def test_default_image_is_fully_qualified_and_one_value_moves_every_program() -> None:
    defaults = chart_defaults()["agent"]["image"]
    registry = defaults["repository"].split("/")[0]
    assert "." in registry or ":" in registry, f"{defaults['repository']} names no registry"
    version = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["appVersion"]
    assert render(ACCESS_KEY).container("DaemonSet", AGENT)["image"] == (
        f"{defaults['repository']}:{version}"
    )
    mirror = "registry.example.com:5000/erdma/erdma"
    out = render(
        merge(
            ACCESS_KEY,
            {"agent": {"image": {"repository": mirror}}, "sharedRdma": {"enabled": True}},
        )
    )
    images = {
        "agent": out.container("DaemonSet", AGENT)["image"],
        "shared": out.container("DaemonSet", SHARED)["image"],
        "controller": out.container("Deployment", CONTROLLER)["image"],
        "smcr-init": _smc_init_image(out),
    }
    assert set(images.values()) == {f"{mirror}:{version}"}, images


def test_a_digest_pins_every_program_as_repository_at_digest() -> None:
    out = render(merge(ACCESS_KEY, {"agent": {"image": {"digest": DIGEST, "tag": "0.1.0"}}}))
    want = f"docker.io/erdma-k8s/erdma@{DIGEST}"
    assert out.container("DaemonSet", AGENT)["image"] == want
    assert out.container("Deployment", CONTROLLER)["image"] == want
    assert _smc_init_image(out) == want


def test_a_controller_image_of_its_own_does_not_inherit_the_agents_digest() -> None:
    agent_digest = {"agent": {"image": {"digest": DIGEST}}}
    tagged = render(merge(ACCESS_KEY, agent_digest, {"controller": {"image": {"tag": "dev"}}}))
    assert tagged.container("Deployment", CONTROLLER)["image"] == "docker.io/erdma-k8s/erdma:dev"
    other = "sha256:" + "cd" * 32
    pinned = render(
        merge(
            ACCESS_KEY,
            agent_digest,
            {
                "controller": {
                    "image": {
                        "repository": "registry.example.com/erdma/controller",
                        "digest": other,
                    }
                }
            },
        )
    )
    assert pinned.container("Deployment", CONTROLLER)["image"] == (
        f"registry.example.com/erdma/controller@{other}"
    )
