"""`helm upgrade` from the previous chart version: a release installed with a values file, then
upgraded to this chart with `--reuse-values` (the old version's defaults and the release's
values, Helm's real behaviour) or `--reset-then-reuse-values` (this values.yaml and the
release's values). Each time the programs load what was rendered, as they do at start, and
the behaviour the release had is kept. And the chart version moves with its values."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from erdma.agent.config import build_config
from erdma.controller.config import ControllerConfig
from tests.chart_history import ChartVersion, NoHistory, previous_version, reuse_values_chart
from tests.helm_support import CHART_DIR, Rendered, render
from tests.integration.chart_programs import agent_loads, controller_loads, node_loads
from tests.integration.helm_cases import AGENT, CONTROLLER, NODE_A, SHARED, mounted_agent_config

ACCESS_KEY = {"credentials": {"type": "access_key", "accessKeyID": "ak", "accessKeySecret": "sk"}}
#: agent settings a version before the driver installer did not have
NEW = {"driver_installer"}
#: values files of releases installed from the previous version (its keys only)
RELEASES: dict[str, dict[str, Any]] = {
    "regular-defaults": ACCESS_KEY,
    "regular-webhook-shared": {
        **ACCESS_KEY,
        "config": {"enableWebhook": True, "region": "cn-hangzhou"},
        "sharedRdma": {"enabled": True},
    },
    "local-ofed": {"config": {"localERIDiscovery": True}, "agent": {"preferDriver": "ofed"}},
    "rrsa-k3s": {
        "credentials": {"type": "oidc_role_arn", "roleName": "erdma"},
        "agent": {"preferDriver": "compat", "criSocketDir": "/run/k3s/containerd"},
        "controller": {"webhookCertCheckSeconds": 3600, "waitNodeReadyTimeoutSeconds": 60},
    },
}


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ChartVersion, Path]]:
    try:
        version = previous_version()
    except NoHistory as exc:
        pytest.skip(f"no earlier chart version to upgrade from: {exc}")
    yield version, version.write(tmp_path_factory.mktemp("previous-chart"))


def _injects(config: ControllerConfig) -> bool:
    """Whether the controller injects smcr-init (the reference's three gates)."""
    return (
        config.enable_webhook
        and config.enable_init_container_inject
        and (config.enable_device_plugin)
    )


def _cri_volumes(out: Rendered) -> list[dict[str, Any]]:
    pod = out.get("DaemonSet", AGENT)["spec"]["template"]["spec"]
    return [v for v in pod["volumes"] if v["name"] in ("cri", "cri-dir")]


def _privileges(out: Rendered, name: str) -> tuple[bool, set[str]]:
    """Whether the DaemonSet's container is privileged, and the capabilities it adds."""
    context = out.container("DaemonSet", name)["securityContext"]
    added = context.get("capabilities", {}).get("add", [])
    return bool(context.get("privileged")), set(added)


def _same_controller(old: ControllerConfig, new: ControllerConfig) -> None:
    gates = {"enable_init_container_inject", "enable_device_plugin"}
    assert new.model_dump(exclude=gates) == old.model_dump(exclude=gates)
    assert _injects(new) == _injects(old)


def upgrade(old_chart: Path, release: str, tmp_path: Path, reuse: bool) -> tuple[Rendered, ...]:
    """(the release as installed from the previous version, the release upgraded to this one)
    with `--reuse-values` or, when not ``reuse``, `--reset-then-reuse-values`."""
    values = RELEASES[release]
    chart = reuse_values_chart(tmp_path / "chart", old_chart, values) if reuse else CHART_DIR
    return render(values, chart_dir=old_chart), render(values, chart_dir=chart, upgrade=True)


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_reuse_values_keeps_what_the_release_did(
    previous: tuple[ChartVersion, Path], release: str, tmp_path: Path
) -> None:
    before, after = upgrade(previous[1], release, tmp_path, reuse=True)
    old, new = node_loads(before, tmp_path / "old"), node_loads(after, tmp_path / "new")
    if _knew_the_installer(before):
        assert new.model_dump() == old.model_dump()
    else:  # an agent without the installer: the release keeps installing nothing
        assert not (new.prepare_node and new.driver_installer.enabled)
        assert new.model_dump(exclude=NEW) == old.model_dump(exclude=NEW)
    if before.find("DaemonSet", SHARED):
        shared_before = agent_loads(before, SHARED, tmp_path / "old-shared")
        shared_after = agent_loads(after, SHARED, tmp_path / "new-shared")
        assert shared_after.model_dump(exclude=NEW) == shared_before.model_dump(exclude=NEW)
    for name in (AGENT, SHARED):
        if before.find("DaemonSet", name):
            privileged, capabilities = _privileges(before, name)
            assert _privileges(after, name)[0] == privileged, (
                "the SMC-R path, and with it the agent's privileges, must not change"
            )
            assert _privileges(after, name)[1] <= capabilities, name
    assert node_rights(after) <= node_rights(before), "an upgrade that keeps values adds none"
    if before.find("Deployment", CONTROLLER):
        _same_controller(controller_loads(before, tmp_path), controller_loads(after, tmp_path))
        pod = after.get("Deployment", CONTROLLER)["spec"]["template"]["spec"]
        assert pod["priorityClassName"] == "system-cluster-critical"
        assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in pod["tolerations"]


def _knew_the_installer(out: Rendered) -> bool:
    """Whether a chart version rendered driverInstaller settings (into the agent's file, or
    from 0.5.0 on into the driver DaemonSet's)."""
    files = out.get("ConfigMap", AGENT)["data"]
    return any("driverInstaller" in text for text in files.values())


def node_rights(out: Rendered) -> set[str]:
    """Every right the node pods hold, whichever pod holds it (NOTES.txt's comparison)."""
    rights: set[str] = set()
    for daemonset in out.all("DaemonSet"):
        pod = daemonset["spec"]["template"]["spec"]
        rights |= {key for key in ("hostNetwork", "hostPID") if pod.get(key)}
        for container in pod["containers"] + pod.get("initContainers", []):
            context = container.get("securityContext", {})
            rights |= {"privileged"} if context.get("privileged") else set()
            rights |= set(context.get("capabilities", {}).get("add", []))
    return rights


def test_an_agent_of_the_previous_release_reads_the_upgraded_configmap(
    previous: tuple[ChartVersion, Path], tmp_path: Path
) -> None:
    """Mid-rollout, an old pod that restarts reads the new ConfigMap under its old `--config`
    name, and must get the settings the new pods get."""
    values = RELEASES["regular-webhook-shared"]
    before, after = render(values, chart_dir=previous[1]), render(values, upgrade=True)
    for name in (AGENT, SHARED):
        old_name = Path(str(before.container("DaemonSet", name)["args"][-1])).name
        old_pod = mounted_agent_config(after, name, tmp_path / "old", old_name)
        new_pod = mounted_agent_config(after, name, tmp_path / "new")
        assert build_config(old_pod, environ=NODE_A) == build_config(new_pod, environ=NODE_A)


def test_reuse_values_mounts_the_socket_the_release_named(
    previous: tuple[ChartVersion, Path], tmp_path: Path
) -> None:
    values: dict[str, Any] = {
        **ACCESS_KEY,
        "smcr": {"mode": "prestart"},
        "agent": {"runtimeSocket": "/run/k3s/containerd/containerd.sock"},
    }
    chart = reuse_values_chart(tmp_path / "chart", previous[1], values)
    before = render(values, chart_dir=previous[1])
    after = render(values, chart_dir=chart, upgrade=True)
    assert _cri_volumes(before), f"the chart of {previous[0].commit[:12]} mounted no CRI socket"
    pod = after.get("DaemonSet", AGENT)["spec"]
    (cri,) = [v for v in pod["template"]["spec"]["volumes"] if v["name"] == "cri"]
    assert cri["hostPath"] == {"path": "/run/k3s/containerd/containerd.sock", "type": "Socket"}


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_reset_then_reuse_values_takes_the_new_defaults(
    previous: tuple[ChartVersion, Path], release: str, tmp_path: Path
) -> None:
    before, after = upgrade(previous[1], release, tmp_path, reuse=False)
    old, new = node_loads(before, tmp_path / "old"), node_loads(after, tmp_path / "new")
    assert new.prestart_container is False  # smcr.mode defaults to auto: the webhook, or off
    # the driver installer is on by default, in the host's namespaces
    assert new.driver_installer.enabled and new.host_namespace
    keep = {"prestart_container", "runtime_socket", "host_namespace", *NEW}
    assert new.model_dump(exclude=keep) == old.model_dump(exclude=keep)
    if before.find("Deployment", CONTROLLER):
        old_config, config = controller_loads(before, tmp_path), controller_loads(after, tmp_path)
        assert config.webhook_cert_check_seconds == old_config.webhook_cert_check_seconds
        assert _injects(config) == (release != "local-ofed")  # smcr.mode=auto: the webhook


def _chart_yaml(files: dict[str, bytes]) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(files["Chart.yaml"])
    return loaded


def _semver(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("-")[0].split("."))


def test_the_chart_version_moves_with_every_change_to_values_yaml(
    previous: tuple[ChartVersion, Path],
) -> None:
    version, _ = previous
    current = (CHART_DIR / "values.yaml").read_bytes()
    if version.files["values.yaml"] == current:
        pytest.skip(f"values.yaml is as in {version.commit[:12]}")
    old = _chart_yaml(version.files)["version"]
    new = _chart_yaml({"Chart.yaml": (CHART_DIR / "Chart.yaml").read_bytes()})["version"]
    assert _semver(new) > _semver(old), (
        f"values.yaml changed since {version.commit[:12]} but Chart.yaml's version is {new} "
        f"(was {old}): raise it"
    )
