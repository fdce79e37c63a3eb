"""A values file written for the reference chart, carried over to this one (docs/migration.md):
its images are refused with the value to set, and once they are set it installs, the programs
accept what it renders, and the DaemonSet and Deployment keep the reference's selectors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helm_python import HelmError

from tests.helm_support import ACCESS_KEY, RELEASE, merge, render
from tests.integration import reference_chart as ref
from tests.integration.chart_programs import agent_loads, controller_loads

#: the changes docs/migration.md asks for: this chart's image for every program
THIS_IMAGE = {
    "agent": {"image": {"repository": "docker.io/erdma-k8s/erdma"}},
    "controller": {"image": {"repository": ""}},
}
#: Regular mode needs an identity; a reference user had filled these in (its README asks to)
MIGRATED = merge(ref.VALUES, THIS_IMAGE, ACCESS_KEY)


@pytest.mark.parametrize(
    "values, message",
    [
        (
            ref.VALUES,
            "agent.image.repository=registry.aliyuncs.com/erdma/agent is the reference chart's "
            "agent image, which does not run this chart's programs: set agent.image.repository",
        ),
        (
            merge(ref.VALUES, {"agent": THIS_IMAGE["agent"]}),
            "controller.image.repository=registry.aliyuncs.com/erdma/controller is the reference "
            "chart's controller image, which does not run this chart's programs: set "
            'controller.image.repository=""',
        ),
        (
            merge(
                MIGRATED,
                {
                    "config": {
                        "smcInitImage": "registry.cn-hangzhou.aliyuncs.com/erdma/smcr_init:latest"
                    }
                },
            ),
            "config.smcInitImage=registry.cn-hangzhou.aliyuncs.com/erdma/smcr_init:latest is the "
            "reference chart's smcr-init image, which does not hold `erdma smcr-init`: set "
            'config.smcInitImage=""',
        ),
    ],
    ids=["agent-image", "controller-image", "smcr-init-image"],
)
def test_reference_images_are_refused_naming_the_value_to_set(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(HelmError) as refused:
        render(values)
    assert message in str(refused.value)


def test_reference_values_file_installs_once_the_image_is_this_charts(tmp_path: Path) -> None:
    out = render(MIGRATED)
    agent = agent_loads(out, ref.AGENT, tmp_path)
    controller = controller_loads(out, tmp_path)
    # clusterDomain "" (the reference's default, which it never read) means cluster.local
    assert controller.cluster_domain == "cluster.local"
    assert controller.manage_non_owned_enis is True
    assert agent.jumbo_frame_mtu == 8500
    assert out.container("DaemonSet", ref.AGENT)["image"] == "docker.io/erdma-k8s/erdma:latest"
    assert out.container("Deployment", ref.CONTROLLER)["image"] == (
        "docker.io/erdma-k8s/erdma:latest"
    )
    # the reference's PreStartContainer SMC-R path is one value away, and off without it
    assert agent.prestart_container is False
    kept = render(merge(MIGRATED, {"smcr": {"mode": "prestart"}}))
    assert agent_loads(kept, ref.AGENT, tmp_path).prestart_container is True


def test_reference_values_file_in_local_mode_needs_no_credentials(tmp_path: Path) -> None:
    out = render(merge(ref.VALUES, THIS_IMAGE, {"config": {"localERIDiscovery": True}}))
    assert out.find("Deployment", ref.CONTROLLER) is None
    assert agent_loads(out, ref.AGENT, tmp_path).exposed_local_eris == ["i-XXX erdma_0/erdma_1"]


@pytest.mark.parametrize(
    "kind, name, tier",
    [("DaemonSet", ref.AGENT, "agent"), ("Deployment", ref.CONTROLLER, "controller")],
)
def test_workloads_keep_the_reference_selectors(kind: str, name: str, tier: str) -> None:
    """`helm upgrade` patches the objects of the same name; a changed selector is refused."""
    spec = render(MIGRATED).get(kind, name)["spec"]
    assert spec["selector"] == {"matchLabels": ref.selector(RELEASE, tier)}
    labels = spec["template"]["metadata"]["labels"]
    assert labels.items() >= ref.selector(RELEASE, tier).items()
