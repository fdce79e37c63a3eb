"""The chart scrapes the controller: a ServiceMonitor and a Service that reach `/metrics` on the
controller's health port, with metrics.serviceMonitor.enabled, in Regular mode only."""

from __future__ import annotations

from typing import Any

from tests.helm_support import ACCESS_KEY, Rendered, merge, render
from tests.integration.helm_cases import AGENT, CONTROLLER

MONITORED = merge(ACCESS_KEY, {"metrics": {"serviceMonitor": {"enabled": True}}})


def _pods_selected(out: Rendered, service: dict[str, Any]) -> set[str]:
    """Workloads whose pod template the Service's selector matches."""
    wanted = service["spec"]["selector"].items()
    return {
        o["metadata"]["name"]
        for o in out.objects
        if o["kind"] in ("Deployment", "DaemonSet")
        and wanted <= o["spec"]["template"]["metadata"]["labels"].items()
    }


def test_service_monitor_scrapes_the_controller_on_its_health_port() -> None:
    out = render(merge(MONITORED, {"controller": {"healthPort": 8181}}))
    monitor = out.get("ServiceMonitor", CONTROLLER)
    service = out.get("Service", f"{CONTROLLER}-metrics")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["port"] == "metrics"
    (port,) = service["spec"]["ports"]
    assert port["name"] == "metrics" and port["port"] == 8181
    assert _pods_selected(out, service) == {CONTROLLER}
    container = out.container("Deployment", CONTROLLER)
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named[port["targetPort"]] == 8181
    # the agents' monitor does not pick the controller's Service up (no double scrape)
    agents = out.get("ServiceMonitor", AGENT)["spec"]["selector"]["matchLabels"]
    assert not agents.items() <= service["metadata"]["labels"].items()


def test_no_controller_monitor_without_a_controller_or_its_port() -> None:
    local = render(merge(MONITORED, {"config": {"localERIDiscovery": True}}))
    assert local.find("ServiceMonitor", CONTROLLER) is None
    assert local.find("ServiceMonitor", AGENT) is not None
    off = render(merge(MONITORED, {"controller": {"healthPort": 0}}))
    assert off.find("Service", f"{CONTROLLER}-metrics") is None
    assert render(ACCESS_KEY).find("ServiceMonitor", CONTROLLER) is None
