"""The ERIs-by-state gauge follows every Node's latest states, kept as running totals."""

from __future__ import annotations

from erdma.controller.metrics import ControllerMetrics

GAUGE = "erdma_controller_eris"


def states(metrics: ControllerMetrics) -> dict[str, float]:
    return {s: metrics.value(GAUGE, state=s) for s in ("Ready", "Pending", "Failed")}


def test_totals_follow_each_nodes_latest_states_and_forgotten_nodes_leave():
    m = ControllerMetrics()
    m.set_node_eris("a", ["Pending", "Pending"])
    m.set_node_eris("b", ["Pending"])
    assert states(m) == {"Ready": 0, "Pending": 3, "Failed": 0}
    m.set_node_eris("a", ["Ready", "Failed"])  # replaces a's states, not added to them
    m.set_node_eris("b", ["Ready"])
    assert states(m) == {"Ready": 2, "Pending": 0, "Failed": 1}
    m.forget_node("a")
    m.forget_node("a")  # twice, or a Node never seen: nothing to take away
    m.forget_node("never-seen")
    assert states(m) == {"Ready": 1, "Pending": 0, "Failed": 0}
    m.set_node_eris("b", [])  # an instance type change left it without ERIs
    assert states(m) == {"Ready": 0, "Pending": 0, "Failed": 0}
