"""The agent, started as the Helm chart starts it, registers `aliyun/erdma` with the real
kubelet, and the Node's capacity/allocatable that the kubelet itself writes follows the
fixture host's port states."""

from __future__ import annotations

import pytest

from tests.e2e.kubelet_support import node_resource, wait_for
from tests.e2e.node_support import Node

pytestmark = pytest.mark.root
ERDMA = "aliyun/erdma"


def test_node_capacity_is_devices_times_slots_and_follows_port_state(node: Node) -> None:
    agent = node.agent("default")
    slots = int(agent.config["slotsPerDevice"])
    api, name = node.api, node.kubelet.node
    full = (2 * slots, 2 * slots)  # the default fixture: erdma_0 and erdma_1

    wait_for(lambda: node_resource(api, name, ERDMA) == full, f"{ERDMA} {full} on the Node")
    assert "--config" in agent.args  # the DaemonSet's own arguments, the ConfigMap's file

    agent.host.set_port_state("erdma_0", False)
    wait_for(
        lambda: node_resource(api, name, ERDMA) == (2 * slots, slots),
        "allocatable down by one device's slots",
    )

    agent.host.set_port_state("erdma_0", True)
    wait_for(lambda: node_resource(api, name, ERDMA) == full, "allocatable restored")
