"""ERIs whose Node is gone: kept while the instance runs, deleted once it is released, and never
leaked when the controller dies in the middle of a create or attach.

The production controller runs in-process on the real kube-testserver and the real SDK against
the ECS emulator. "Killed" means its task is cancelled while ECS holds one of its calls: the
call either never reaches ECS (lost) or is carried out with the answer never delivered.
"""

from __future__ import annotations

import asyncio

import pytest

from erdma.kube import crd
from tests.fakes.ecs.audit import eris_on, leaked, ours
from tests.fakes.ecs.client import GPU_TWO_CARDS, cloud_for
from tests.integration.controller_rig import (
    delete_node,
    kill,
    object_gone,
    running_controller,
    start_controller,
    until,
    wait_for_call,
)
from tests.integration.controller_support import add_node, eventually, ready_device

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]

SWEEPS = 1.5  # seconds: three orphan sweeps at the test interval (0.5 s)


async def test_node_deleted_while_its_instance_runs_keeps_eris_for_the_next_node(
    kube_api, emu, k8s
):
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    async with running_controller(kube_api.kubeconfig, cloud_for(emu)):
        name = await add_node(k8s, inst)
        await eventually(lambda: ready_device(k8s, name))
        before = eris_on(emu.world, inst.id)

        await delete_node(k8s, name)  # kubectl delete node, the instance keeps running
        await object_gone(k8s, name)
        await asyncio.sleep(SWEEPS)
        assert eris_on(emu.world, inst.id) == before
        assert emu.faults.calls["DeleteNetworkInterface"] == 0

        again = await add_node(k8s, inst)  # the kubelet registers the instance again
        obj = await eventually(lambda: ready_device(k8s, again))
    assert {d.network_card_index: d.id for d in crd.parse(obj).devices} == before
    assert emu.faults.calls["CreateNetworkInterface"] == 1  # card 1's ERI, once


async def test_eris_are_deleted_once_the_instance_is_released_after_its_node(kube_api, emu, k8s):
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    async with running_controller(kube_api.kubeconfig, cloud_for(emu)):
        name = await add_node(k8s, inst)
        await eventually(lambda: ready_device(k8s, name))
        (created,) = ours(emu.world, inst.id)
        await delete_node(k8s, name)  # scale-in: drain and delete the Node first ...
        await object_gone(k8s, name)
        await asyncio.sleep(SWEEPS)
        assert [e.id for e in ours(emu.world, inst.id)] == [created.id]

        emu.world.release_instance(inst.id)  # ... then release the instance
        assert await until(lambda: not ours(emu.world, inst.id), timeout=10) is not None
    assert created.id not in emu.world.enis


async def test_a_node_still_listed_keeps_unattached_eris_of_its_instance(kube_api, emu, k8s):
    """An ERI created for a Node that exists is never taken for an orphan, even unattached."""
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    emu.faults.inject("AttachNetworkInterface", "QuotaExceed.Eri", status=403, times=100)
    async with running_controller(kube_api.kubeconfig, cloud_for(emu)):
        await add_node(k8s, inst)
        await wait_for_call(emu, "AttachNetworkInterface", count=3)
        await asyncio.sleep(SWEEPS)
        (waiting,) = ours(emu.world, inst.id)
    assert waiting.status == "Available" and emu.faults.calls["DeleteNetworkInterface"] == 0


KILL_POINTS = [
    # (call held when the controller dies, carried out?, instance released meanwhile?)
    ("CreateNetworkInterface", True, True),
    ("CreateNetworkInterface", True, False),
    ("AttachNetworkInterface", False, False),
    ("AttachNetworkInterface", True, False),
    ("AttachNetworkInterface", True, True),
]


@pytest.mark.parametrize(
    ("action", "carried_out", "released"),
    KILL_POINTS,
    ids=[
        f"{a}-{'done' if c else 'lost'}-{'released' if r else 'running'}" for a, c, r in KILL_POINTS
    ],
)
async def test_killed_mid_call_then_node_deleted_leaks_nothing(
    kube_api, emu, k8s, action, carried_out, released
):
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    if carried_out:
        emu.faults.inject(action, answer_delay=5)
    else:
        emu.faults.inject(action, "ServiceUnavailable", status=503, delay=5)
    controller = start_controller(kube_api.kubeconfig, cloud_for(emu))
    try:
        name = await add_node(k8s, inst)
        await wait_for_call(emu, action)
        await asyncio.sleep(0.2)  # let ECS carry the call out
    finally:
        await kill(controller)
    emu.faults.clear()
    attached = eris_on(emu.world, inst.id)
    await delete_node(k8s, name)
    if released:
        emu.world.release_instance(inst.id)

    async with running_controller(kube_api.kubeconfig, cloud_for(emu)):
        assert await until(lambda: not leaked(emu.world, inst.id), timeout=10) is not None
        await asyncio.sleep(SWEEPS)
        if released:
            assert ours(emu.world, inst.id) == []
            return
        assert eris_on(emu.world, inst.id) == attached  # attached ones stay on the instance
        again = await add_node(k8s, inst)
        obj = await eventually(lambda: ready_device(k8s, again))
    kept = {e.id for e in ours(emu.world, inst.id)}
    assert {d.id for d in crd.parse(obj).devices if not d.is_primary_eni} == kept
    assert set(attached.values()) - {inst.primary_eni_id} <= kept  # adopted, not replaced
    assert leaked(emu.world) == []


async def test_cleanup_running_instances_deletes_eris_of_a_node_deleted_while_it_runs(
    kube_api, emu, k8s
):
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    cloud = cloud_for(emu)
    async with running_controller(kube_api.kubeconfig, cloud, cleanupRunningInstances=True):
        name = await add_node(k8s, inst)
        await eventually(lambda: ready_device(k8s, name))
        (created,) = ours(emu.world, inst.id)
        await delete_node(k8s, name)  # kubectl delete node, the instance keeps running
        await object_gone(k8s, name)
        assert await until(lambda: created.id not in emu.world.enis, timeout=10) is not None
    assert inst.id in emu.world.instances  # still running: never released
    assert emu.faults.calls["DetachNetworkInterface"] == 1
