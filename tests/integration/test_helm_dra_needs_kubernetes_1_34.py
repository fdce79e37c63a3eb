"""`dra.enabled` renders DeviceClasses of `resource.k8s.io/v1`, an API Kubernetes serves from 1.34
on: on an older cluster the chart refuses to render, in one line that names the cluster's
version and what to do, instead of an install that fails half way on a missing API."""

from __future__ import annotations

import pytest
from helm_python import HelmError

from tests.helm_support import ACCESS_KEY, merge, render

DRA = merge(ACCESS_KEY, {"dra": {"enabled": True}})


@pytest.mark.parametrize("version", ["1.32.0", "v1.33.9", "v1.33.4-eks-a737599"])
def test_dra_below_1_34_is_refused_in_one_line_naming_the_version(version: str) -> None:
    with pytest.raises(HelmError) as refused:
        render(DRA, kube_version=version)
    message = str(refused.value).strip()
    assert "\n" not in message, message
    assert "dra.enabled=true needs Kubernetes 1.34 or later" in message
    assert f"v{version.removeprefix('v')}" in message
    assert "set dra.enabled=false" in message


@pytest.mark.parametrize("version", ["1.34.0", "v1.34.1-gke.1200", "1.36.2"])
def test_dra_from_1_34_renders_its_device_classes(version: str) -> None:
    out = render(DRA, kube_version=version)
    assert {c["apiVersion"] for c in out.all("DeviceClass")} == {"resource.k8s.io/v1"}


def test_without_dra_older_clusters_are_not_refused() -> None:
    out = render(ACCESS_KEY, kube_version="1.30.0")
    assert out.all("DeviceClass") == []
