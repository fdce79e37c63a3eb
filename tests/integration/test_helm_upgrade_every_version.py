"""`helm upgrade` for real (the Helm SDK, against the real API server) from every chart version
in git history to this one: the old version installed, then upgraded with `--reuse-values` (the
old version's defaults and the release's values) and again with `--reset-values` (this
values.yaml and the release's values). Each release lives in a namespace of its own with a
fullnameOverride of its own, so the cluster-scoped objects of the versions do not meet.

And NOTES: an upgrade that gives the node pods a right they did not have says which."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest

from tests.chart_history import ChartVersion, NoHistory, every_version
from tests.fakes.kubeapi import KubeApiServer
from tests.helm_support import ACCESS_KEY, CHART_DIR, merge
from tests.integration import kubectl_support as kc
from tests.kubeapi_support import api_server_or_skip

PRIVILEGES_NOTE = "This upgrade adds privileges on the nodes:"


def _versions() -> list[tuple[str, ChartVersion]]:
    try:
        return every_version()
    except NoHistory:
        return []


VERSIONS = _versions()


@pytest.fixture(scope="module")
def api() -> Iterator[KubeApiServer]:
    kc.kubectl_or_skip()
    with api_server_or_skip() as server:
        yield server


def helm_in(api: KubeApiServer, namespace: str) -> helm_python.Config:
    """Helm's actions on one namespace (an upgrade cannot change its config's namespace)."""
    return helm_python.Config(kubeconfig_path=str(api.kubeconfig), namespace=namespace)


def release_values(slug: str, **more: Any) -> dict[str, Any]:
    return merge(ACCESS_KEY, {"fullnameOverride": f"erdma-{slug}", **more})


def install(
    helm: helm_python.Config, old: ChartVersion, slug: str, tmp: Path, values: dict[str, Any]
) -> None:
    chart = old.write(tmp / "old-chart")
    helm.install(str(chart), slug, values, create_namespace=True)


def notes(release: dict[str, Any]) -> str:
    """What `helm upgrade` prints after the release: the rendered NOTES.txt."""
    return str(release.get("notes", ""))


def live_daemonset(api: KubeApiServer, slug: str, component: str) -> dict[str, Any]:
    got = kc.kubectl(
        api.kubeconfig, "-n", slug, "get", "ds", f"erdma-{slug}-{component}", "-o", "json"
    )
    assert got.returncode == 0, got.stderr
    found: dict[str, Any] = json.loads(got.stdout)
    return found


def agent_pod(api: KubeApiServer, slug: str) -> dict[str, Any]:
    spec: dict[str, Any] = live_daemonset(api, slug, "agent")["spec"]["template"]["spec"]
    return spec


@pytest.mark.skipif(not VERSIONS, reason="no earlier chart version in git history")
@pytest.mark.parametrize("version", [v for v, _ in VERSIONS])
def test_upgrade_from_every_earlier_version(
    api: KubeApiServer, version: str, tmp_path: Path
) -> None:
    old = dict(VERSIONS)[version]
    slug = "v" + version.replace(".", "-")
    values = release_values(slug)
    with helm_in(api, slug) as helm:
        install(helm, old, slug, tmp_path, values)
        reused = helm.upgrade(str(CHART_DIR), slug, {}, reuse_values=True)
        assert PRIVILEGES_NOTE not in notes(reused), notes(reused)
        assert not agent_pod(api, slug).get("hostPID")
        helm.upgrade(str(CHART_DIR), slug, values, reset_values=True)
        assert not agent_pod(api, slug).get("hostPID")
        assert live_daemonset(api, slug, "driver")["spec"]["template"]["spec"]["hostPID"]


@pytest.mark.skipif(not VERSIONS, reason="no earlier chart version in git history")
def test_an_upgrade_that_adds_privileges_says_which(api: KubeApiServer, tmp_path: Path) -> None:
    slug = "privileges"
    values = release_values(slug, smcr={"mode": "off"})
    with helm_in(api, slug) as helm:
        install(helm, VERSIONS[0][1], slug, tmp_path, values)
        prestart = merge(values, {"smcr": {"mode": "prestart"}})
        said = notes(helm.upgrade(str(CHART_DIR), slug, prestart, reuse_values=True))
    assert PRIVILEGES_NOTE in said, said
    (line,) = [x for x in said.splitlines() if x.startswith(PRIVILEGES_NOTE)]
    assert line.split(":", 1)[1].split("(")[0].strip() == "privileged"
