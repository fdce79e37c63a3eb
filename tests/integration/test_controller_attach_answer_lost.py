"""An attach whose answer was lost is looked at before it is sent again.

ECS carries the AttachNetworkInterface out at once but its answer comes after the client's
timeout (the ECS emulator's ``answer_delay``). The controller used to send the attach again,
and ECS refused it with ``InvalidOperation.InvalidEniState``: the ERI was already attaching.
"""

from __future__ import annotations

import uuid
from functools import partial

from tests.fakes.ecs.client import GENERAL_ERI, GPU_TWO_CARDS, cloud_for
from tests.integration.controller_rig import running_controller
from tests.integration.controller_support import add_node, eventually, ready_device

#: the client's timeout: long enough that only the delayed attach runs past it, even when a
#: loaded machine slows every other call (the look before resending included)
TIMEOUT = 3.0


def own_nodes() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """(labels for this test's Nodes, the controller's nodeSelector for them): Nodes that other
    tests left on the shared API server may name this emulator's instance ids, and reconciling
    two Nodes of one instance attaches a second ERI per card, which ECS refuses."""
    labels = {"erdma-test": uuid.uuid4().hex[:8]}
    return labels, {"nodeSelector": labels}


pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]

ATTACH = "AttachNetworkInterface"


async def test_an_attach_answered_too_late_is_not_sent_again(kube_api, k8s, emu):
    emu.faults.inject(ATTACH, answer_delay=2 * TIMEOUT, times=1)
    cloud = cloud_for(emu, timeout_seconds=TIMEOUT)
    labels, selector = own_nodes()
    async with running_controller(kube_api.kubeconfig, cloud, **selector):
        instance = emu.world.add_instance(GPU_TWO_CARDS.name)
        name = await add_node(k8s, instance, labels=labels)
        await eventually(lambda: ready_device(k8s, name), timeout=60)
    assert emu.faults.refused == {}, "ECS refused a call for the ERI's state"
    assert cloud.metrics.value("erdma_controller_ecs_retries_total", action=ATTACH) == 0


async def test_every_attach_answered_too_late_still_ends_ready_without_a_refusal(
    kube_api, k8s, emu
):
    emu.faults.inject(ATTACH, answer_delay=2 * TIMEOUT, times=4)
    cloud = cloud_for(emu, timeout_seconds=TIMEOUT)
    labels, selector = own_nodes()
    async with running_controller(kube_api.kubeconfig, cloud, **selector):
        nodes = [
            await add_node(k8s, emu.world.add_instance(kind), labels=labels)
            for kind in (GPU_TWO_CARDS.name, GENERAL_ERI.name)
        ]
        for name in nodes:
            await eventually(partial(ready_device, k8s, name), timeout=60)
    assert emu.faults.refused == {}, "ECS refused a call for the ERI's state"
