"""The node DaemonSets roll out behind their readiness: probes on the agents' metrics port,
minReadySeconds and a configurable updateStrategy, so a bad preferDriver or image stops a
rollout at its first wave instead of taking every node's devices away."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest

from tests.helm_support import ACCESS_KEY, merge, render
from tests.integration.helm_cases import AGENT, SHARED

BOTH = {"sharedRdma": {"enabled": True}}


def _daemonsets(values: dict[str, Any]) -> list[dict[str, Any]]:
    out = render(merge(ACCESS_KEY, BOTH, values))
    return [out.get("DaemonSet", AGENT), out.get("DaemonSet", SHARED)]


def test_agents_are_probed_on_their_metrics_port_and_roll_out_slowly() -> None:
    for ds in _daemonsets({}):
        (container,) = ds["spec"]["template"]["spec"]["containers"]
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert ds["spec"]["minReadySeconds"] == 10
        assert ds["spec"]["updateStrategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": "10%"},
        }


def test_rollout_values_override_and_zero_is_kept() -> None:
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    for ds in _daemonsets({"agent": {"updateStrategy": strategy, "minReadySeconds": 0}}):
        assert ds["spec"]["updateStrategy"] == strategy
        assert ds["spec"]["minReadySeconds"] == 0


def test_no_metrics_port_means_no_probes() -> None:
    values = {"agent": {"metrics": {"port": 0}}, "sharedRdma": {"metrics": {"port": 0}}}
    for ds in _daemonsets(values):
        (container,) = ds["spec"]["template"]["spec"]["containers"]
        assert "readinessProbe" not in container and "livenessProbe" not in container


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"agent": {"updateStrategy": {"type": "Recreate"}}}, "/agent/updateStrategy/type"),
        ({"agent": {"minReadySeconds": -1}}, "/agent/minReadySeconds"),
        (
            {"agent": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "ten"}}}},
            "/agent/updateStrategy/rollingUpdate/maxUnavailable",
        ),
    ],
)
def test_bad_rollout_values_are_refused_naming_the_key(values: dict[str, Any], key: str) -> None:
    with pytest.raises(helm_python.HelmValuesError) as err:
        render(merge(ACCESS_KEY, values))
    assert key in str(err.value)
