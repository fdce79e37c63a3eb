"""Upgrading a reference release in place (docs/migration.md) never deletes the ERdmaDevice CRD,
and with it every ERdmaDevice, whichever part of the migration's step 1 is skipped.

The reference chart installs the CRD as a template of its release; this chart keeps it in
`crds/`, outside the release, so Helm's upgrade deletes the CRD unless the live one carries
`helm.sh/resource-policy: keep`. This chart's CRD file carries it, so applying the file (step 1's
second command) is enough; and an upgrade with neither command run is refused, naming the step.

Real Helm (helm_python's install and upgrade, not a render) against the real test API server:
a reference-shaped release (its CRD as a template), two ERdmaDevices with the controller's
finalizer, the documented step-1 commands (some skipped), then `helm upgrade` to this chart with
the migrated values file.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from erdma.kube import crd
from tests import docs_support
from tests.fakes.kubeapi import CRD_MANIFEST, KubeApiServer
from tests.helm_support import ACCESS_KEY, CHART_DIR, REPO_ROOT, merge
from tests.integration import kubectl_support as kc
from tests.integration import reference_chart as ref
from tests.kubeapi_support import api_server_or_skip

DOC = REPO_ROOT / "docs" / "migration.md"
NS = "kube-system"
RELEASE = "alibaba-erdma-controller"
CRD = f"{crd.PLURAL}.{crd.GROUP}"
KEEP = "helm.sh/resource-policy"
#: the reference values file after step 3 (this chart's image), with step 4's --set
MIGRATED = merge(
    ref.VALUES,
    {"agent": {"image": {"repository": "docker.io/erdma-k8s/erdma"}}},
    {"controller": {"image": {"repository": ""}}},
    ACCESS_KEY,
    {"smcr": {"mode": "prestart"}},
)
DEVICES = ("node-a", "node-b")


def step_one() -> list[str]:
    """The commands of "Keep the CRD", step 1 of the in-place upgrade."""
    text = DOC.read_text()
    section = text[text.index("1. **Keep the CRD.**") : text.index("2. **")]
    (block,) = [b for b in docs_support.fenced_blocks(section, str(DOC)) if b.info == "sh"]
    commands = [line.strip() for line in block.body if line.strip()]
    assert any(c.startswith("kubectl annotate crd") for c in commands), commands
    assert any(c.startswith("kubectl apply -f deploy/crds/") for c in commands), commands
    return commands


@pytest.fixture
def api() -> Iterator[KubeApiServer]:
    """A fresh server per test: the CRD is cluster-wide, and each test decides its fate."""
    kc.kubectl_or_skip()
    with api_server_or_skip() as server:
        yield server


@pytest.fixture
def helm(api: KubeApiServer) -> Iterator[helm_python.Config]:
    with helm_python.Config(kubeconfig_path=str(api.kubeconfig), namespace=NS) as config:
        yield config


@pytest.fixture
def reference_release(api: KubeApiServer, helm: helm_python.Config, tmp_path: Path) -> None:
    """The reference chart's release as far as the CRD goes: the CRD as one of its templates
    (without the annotation), and ERdmaDevices as the controller keeps them."""
    chart = tmp_path / "reference-chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        "apiVersion: v2\nname: alibabacloud-erdma-controller\nversion: 0.1.0\n"
    )
    reference_crd = yaml.safe_load(CRD_MANIFEST.read_text())
    reference_crd["metadata"].pop("annotations", None)
    (chart / "templates" / "crd.yaml").write_text(yaml.safe_dump(reference_crd))
    helm.install(str(chart), RELEASE, {})
    established = kc.kubectl(api.kubeconfig, "wait", "--for=condition=Established", f"crd/{CRD}")
    assert established.returncode == 0, established.stderr
    kc.apply(api.kubeconfig, [crd.build(n, f"uid-{n}", "i-abc", [], False) for n in DEVICES])


def run(api: KubeApiServer, command: str) -> None:
    """A documented kubectl command, run from the repository root as the docs' paths are."""
    env = {
        "KUBECONFIG": str(api.kubeconfig),
        "PATH": str(Path(kc.kubectl_or_skip()).parent),
        "HOME": str(api.state_dir),  # kubectl's discovery cache
    }
    argv = ["bash", "-c", command]
    done = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{command}: {done.stderr}"


def live(api: KubeApiServer, *what: str) -> dict[str, Any]:
    got = kc.kubectl(api.kubeconfig, "get", *what, "-o", "json")
    assert got.returncode == 0, got.stderr
    found: dict[str, Any] = yaml.safe_load(got.stdout)
    return found


def assert_nothing_deleted(api: KubeApiServer) -> None:
    assert "deletionTimestamp" not in live(api, "crd", CRD)["metadata"]
    devices = live(api, crd.PLURAL)["items"]
    assert sorted(d["metadata"]["name"] for d in devices) == sorted(DEVICES)
    assert all("deletionTimestamp" not in d["metadata"] for d in devices)


def test_the_crd_file_carries_the_keep_policy() -> None:
    with helm_python.Chart.load(CHART_DIR) as chart:
        (chart_crd,) = [yaml.safe_load(c["data"]) for c in chart.crds]
    assert chart_crd["metadata"]["annotations"][KEEP] == "keep"


@pytest.mark.usefixtures("reference_release")
@pytest.mark.parametrize("skipped", ["kubectl annotate", "kubectl apply"])
def test_upgrade_keeps_every_erdmadevice_with_one_command_of_step_one_skipped(
    api: KubeApiServer, helm: helm_python.Config, skipped: str
) -> None:
    for command in step_one():
        if not command.startswith(skipped):
            run(api, command)
    helm.upgrade(str(CHART_DIR), RELEASE, MIGRATED)
    assert_nothing_deleted(api)
    assert live(api, "crd", CRD)["metadata"]["annotations"][KEEP] == "keep"


@pytest.mark.usefixtures("reference_release")
def test_upgrade_with_step_one_skipped_is_refused_naming_it(
    api: KubeApiServer, helm: helm_python.Config
) -> None:
    with pytest.raises(helm_python.HelmError) as refused:
        helm.upgrade(str(CHART_DIR), RELEASE, MIGRATED)
    message = str(refused.value)
    assert f"CustomResourceDefinition {CRD} belongs to release {RELEASE}" in message, message
    assert f"kubectl annotate crd {CRD} {KEEP}=keep" in message, message
    assert "docs/migration.md, step 1" in message, message
    assert_nothing_deleted(api)


def test_a_release_of_this_chart_upgrades_without_the_step(
    api: KubeApiServer, helm: helm_python.Config
) -> None:
    """Helm installs `crds/` outside the release, so its CRD never belongs to one."""
    helm.install(str(CHART_DIR), RELEASE, ACCESS_KEY)
    assert KEEP in live(api, "crd", CRD)["metadata"]["annotations"]
    helm.upgrade(str(CHART_DIR), RELEASE, ACCESS_KEY)
    assert "deletionTimestamp" not in live(api, "crd", CRD)["metadata"]
