"""The reconciler works on any provider of ``erdma.controller.cloud``, not only on ECS.

The provider here (``memory_cloud``) is defined in the tests alone and built through the
registry by its name; the controller runs on the real API server and takes one Node through
its whole life: interfaces created and attached, the ERdmaDevice Ready, and after the Node is
deleted the interfaces detached and deleted.
"""

from __future__ import annotations

import os

from lightkube.models.core_v1 import NodeSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node

from erdma.controller.cloud import ENI_IN_USE, InstanceTypeCaps, ProviderContext
from erdma.controller.config import parse_config
from erdma.controller.metrics import ControllerMetrics
from erdma.controller.registry import build_cloud
from erdma.kube import crd
from tests.integration.controller_rig import delete_node, object_gone, running_controller
from tests.integration.controller_support import FAST, eventually, ready_device, set_ready
from tests.integration.memory_cloud import NAME, PROVIDERS, MemoryCloud

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]

TWO_CARDS = InstanceTypeCaps(
    "mem.gpu.2cards", eri_quantity=2, network_card_quantity=2, queue_pair_number=8, gpu_amount=8
)
CONFIG = {**FAST, "cleanupRunningInstances": True}


async def memory_cloud() -> MemoryCloud:
    context = ProviderContext("", "", ControllerMetrics(), os.environ)
    cloud = await build_cloud(parse_config(CONFIG), context, NAME, PROVIDERS)
    assert isinstance(cloud, MemoryCloud)
    return cloud


async def test_node_life_cycle_on_a_provider_defined_in_the_tests(kube_api, k8s):
    cloud = await memory_cloud()
    instance = cloud.add_instance(TWO_CARDS, private_ip="10.0.0.7")
    name = "node-memory-cloud"
    async with running_controller(kube_api.kubeconfig, cloud, **CONFIG):
        node = Node(
            metadata=ObjectMeta(name=name),
            spec=NodeSpec(providerID=f"{cloud.region}.{instance.id}"),
        )
        await k8s.create(node)
        await set_ready(k8s, name, True, instance.private_ip)
        obj = await eventually(lambda: ready_device(k8s, name))

        (created,) = cloud.created()
        assert (created.status, created.instance_id, created.card_index) == (
            ENI_IN_USE,
            instance.id,
            1,
        )
        card0, card1 = crd.parse(obj).devices
        assert (card0.id, card0.is_primary_eni) == (instance.primary_eni_id, True)
        assert (card1.id, card1.network_card_index) == (created.id, 1)
        assert {("create", created.id), ("attach", created.id)} <= set(cloud.calls)

        await delete_node(k8s, name)
        await object_gone(k8s, name)

    assert cloud.created() == []
    assert {("detach", created.id), ("delete", created.id)} <= set(cloud.calls)
    assert cloud.interfaces[instance.primary_eni_id].instance_id == instance.id
