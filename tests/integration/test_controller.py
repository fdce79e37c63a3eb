"""`erdma controller` end to end: real API server, real kopf, real SDK against the ECS emulator.

Every test starts its own controller (in-process, or as the real CLI in a subprocess where it is
killed) on the shared kube-testserver and a fresh emulated ECS region, creates Nodes the way a
kubelet would, and checks what a user sees: the ERdmaDevice object, Events on the Node, and the
ENIs in the cloud.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event, Node

from erdma.controller.config import parse_config
from erdma.controller.main import run_controller
from erdma.kube import crd
from erdma.kube.client import ERdmaDeviceResource
from tests.fakes.ecs import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET, EcsEmulator
from tests.fakes.ecs.client import GENERAL_ERI, GPU_TWO_CARDS, NO_ERI, cloud_for
from tests.fakes.ecs.state import InstanceRecord
from tests.integration.controller_support import (
    FAST,
    add_node,
    device,
    eventually,
    ready_device,
    set_ready,
)

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]


@contextlib.asynccontextmanager
async def controller(kube_api, emu, cloud=None, **config: Any) -> AsyncIterator[asyncio.Task]:
    task = asyncio.create_task(
        run_controller(
            parse_config({**FAST, **config}),
            cloud or cloud_for(emu),
            kubeconfig=kube_api.kubeconfig,
            leader_elect=False,
        )
    )
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.wait({task}, timeout=15)


async def events(client: AsyncClient, name: str) -> list[tuple[str, str, str]]:
    found = client.list(Event, namespace="default", fields={"involvedObject.name": name})
    return [(e.type or "", e.reason or "", e.message or "") async for e in found]


def our_eris(emu: EcsEmulator, inst: InstanceRecord) -> list:
    with emu.world.lock:
        return [
            e
            for e in emu.world.enis.values()
            if e.tags.get("instance-id") == inst.id and e.tags.get("creator")
        ]


async def test_fresh_node_gets_eris_attached_and_ready(kube_api, emu, k8s):
    inst = emu.world.add_instance(GPU_TWO_CARDS.name, jumbo_frame=True)
    async with controller(kube_api, emu):
        name = await add_node(k8s, inst)
        obj = await eventually(lambda: ready_device(k8s, name))

    dev = crd.parse(obj)
    assert dev.instance_id == inst.id and dev.jumbo_frame is True
    assert obj["metadata"]["labels"] == {
        crd.LABEL_INSTANCE_ID: inst.id,
        crd.LABEL_NODE_NAME: name,
    }
    node_uid = (await k8s.get(Node, name)).metadata.uid
    assert obj["metadata"]["ownerReferences"][0]["uid"] == node_uid
    assert obj["status"]["ready"] == "2/2"
    card0, card1 = dev.devices
    # card 0: the primary ENI converted; card 1: a new ERI we created and attached
    assert (card0.id, card0.is_primary_eni, card0.queue_pair) == (inst.primary_eni_id, True, 16)
    (created,) = our_eris(emu, inst)
    assert (card1.id, card1.mac, card1.network_card_index) == (created.id, created.mac, 1)
    assert (created.status, created.instance_id, created.card_index) == ("InUse", inst.id, 1)
    assert created.traffic_mode == "HighPerformance"
    reasons = {(t, r) for t, r, _ in await events(k8s, name)}
    assert {("Normal", "PrimaryENIConverted"), ("Normal", "ERIAttaching")} <= reasons


async def test_restart_between_create_and_attach_makes_no_duplicate(kube_api, emu, k8s, tmp_path):
    """The real CLI is SIGKILLed while its AttachNetworkInterface call is in flight."""
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    emu.faults.inject("AttachNetworkInterface", delay=30)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**FAST, "ecsEndpoint": emu.endpoint, "ecsProtocol": "HTTP"}))
    cred = tmp_path / "credential.json"
    cred.write_text(
        json.dumps(
            {"accessKeyID": DEFAULT_ACCESS_KEY_ID, "accessKeySecret": DEFAULT_ACCESS_KEY_SECRET}
        )
    )
    argv = [sys.executable, "-c", "from erdma.controller.main import controller_command as c; c()"]
    argv += ["--config-path", str(config), "--credential-path", str(cred)]
    argv += ["--kubeconfig", str(kube_api.kubeconfig), "--no-leader-elect"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    stderr = proc.stderr
    try:
        name = await add_node(k8s, inst)

        async def attach_in_flight() -> bool:
            if proc.poll() is not None:
                raise AssertionError(
                    f"controller exited early: {proc.stderr and proc.stderr.read()}"
                )
            return emu.faults.calls["AttachNetworkInterface"] >= 1

        await eventually(attach_in_flight, timeout=30)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        stderr.close()
    (leftover,) = our_eris(emu, inst)
    assert leftover.status == "Available"  # created, never attached

    async with controller(kube_api, emu):
        obj = await eventually(lambda: ready_device(k8s, name))

    assert our_eris(emu, inst) == [leftover]
    assert emu.faults.calls["CreateNetworkInterface"] == 1
    assert leftover.status == "InUse" and leftover.card_index == 1
    assert [d["id"] for d in obj["spec"]["devices"]] == [inst.primary_eni_id, leftover.id]


async def test_node_deletion_cleans_up_our_eris_only(kube_api, emu, k8s):
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    async with controller(kube_api, emu):
        name = await add_node(k8s, inst)
        await eventually(lambda: ready_device(k8s, name))
        (created,) = our_eris(emu, inst)
        foreign = emu.world.add_attached_eni(inst, 0, traffic_mode="Standard", queue_pair_number=0)

        emu.world.release_instance(inst.id)  # scale-in: the instance goes, then its Node
        await k8s.delete(Node, name)

        async def gone() -> bool:
            return await device(k8s, name) is None

        await eventually(gone)
    assert created.id not in emu.world.enis  # deleted, its instance being gone
    assert foreign.id in emu.world.enis  # not ours to delete
    assert ("Normal", "ERIDeleted", f"deleted {created.id}") in await events(k8s, name)


async def test_node_deletion_keeps_eris_when_cleanup_disabled(kube_api, emu, k8s):
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    async with controller(kube_api, emu, cleanupOnNodeDelete=False):
        name = await add_node(k8s, inst)
        await eventually(lambda: ready_device(k8s, name))
        emu.world.release_instance(inst.id)
        await k8s.delete(Node, name)

        async def gone() -> bool:
            return await device(k8s, name) is None

        await eventually(gone)
        await asyncio.sleep(1.5)  # several orphan sweeps
    (kept,) = our_eris(emu, inst)
    assert kept.status == "Available"  # detached by the release, and kept as configured


async def test_adopts_existing_eri(kube_api, emu, k8s):
    inst = emu.world.add_instance(GENERAL_ERI.name)
    existing = emu.world.add_attached_eni(
        inst, 0, traffic_mode="HighPerformance", queue_pair_number=8
    )
    async with controller(kube_api, emu):
        name = await add_node(k8s, inst)
        obj = await eventually(lambda: ready_device(k8s, name))
    (dev,) = crd.parse(obj).devices
    assert (dev.id, dev.is_primary_eni) == (existing.id, False)
    assert emu.faults.calls["CreateNetworkInterface"] == 0
    assert emu.world.enis[inst.primary_eni_id].traffic_mode == "Standard"
    assert existing.tags.get("terway.alibabacloud.com/excluded") == "true"


async def test_type_without_erdma_gets_no_object_and_an_event(kube_api, emu, k8s):
    inst = emu.world.add_instance(NO_ERI.name)
    async with controller(kube_api, emu):
        name = await add_node(k8s, inst)

        async def told() -> list:
            return [e for e in await events(k8s, name) if e[1] == "ERdmaNotSupported"]

        ((kind, _, message),) = await eventually(told)
    assert kind == "Normal"
    assert f"instance {inst.id} (ecs.g7.large) cannot use eRDMA" in message
    assert "no ERI quota" in message
    assert await device(k8s, name) is None
    assert emu.faults.calls["CreateNetworkInterface"] == 0
    # no object is written for it, so its jumbo-frame setting (an unbatched call) is not read
    assert emu.faults.calls["DescribeInstanceAttribute"] == 0


async def test_bad_credentials_clear_event_nothing_created(kube_api, emu, k8s):
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    bad = cloud_for(emu, access_key_secret="not-the-secret")
    async with controller(kube_api, emu, cloud=bad):
        name = await add_node(k8s, inst)

        async def told() -> list:
            return [e for e in await events(k8s, name) if e[0] == "Warning"]

        warnings = await eventually(told)
    assert any("SignatureDoesNotMatch" in message for _, _, message in warnings), warnings
    assert await device(k8s, name) is None
    assert our_eris(emu, inst) == []
    assert emu.world.enis[inst.primary_eni_id].traffic_mode == "Standard"


async def test_node_selector_is_respected(kube_api, emu, k8s):
    chosen_inst = emu.world.add_instance(GENERAL_ERI.name)
    other_inst = emu.world.add_instance(GENERAL_ERI.name)
    async with controller(kube_api, emu, nodeSelector={"erdma": "on"}):
        chosen = await add_node(k8s, chosen_inst, labels={"erdma": "on"})
        other = await add_node(k8s, other_inst, labels={"erdma": "off"})
        await eventually(lambda: ready_device(k8s, chosen))
        await asyncio.sleep(1.0)  # several requeue periods
        assert await device(k8s, other) is None
        assert emu.world.enis[other_inst.primary_eni_id].traffic_mode == "Standard"

        await k8s.patch(Node, other, {"metadata": {"labels": {"erdma": "on"}}})
        await eventually(lambda: ready_device(k8s, other))


async def test_waits_for_node_ready(kube_api, emu, k8s):
    inst = emu.world.add_instance(GENERAL_ERI.name)
    async with controller(kube_api, emu):
        name = await add_node(k8s, inst, ready=False)
        await asyncio.sleep(1.5)
        assert await device(k8s, name) is None
        assert emu.faults.calls["ModifyNetworkInterfaceAttribute"] == 0

        await set_ready(k8s, name, True, inst.private_ip)
        await eventually(lambda: ready_device(k8s, name))


async def test_out_of_band_detach_is_repaired(kube_api, emu, k8s):
    inst = emu.world.add_instance(GPU_TWO_CARDS.name)
    async with controller(kube_api, emu):
        name = await add_node(k8s, inst)
        await eventually(lambda: ready_device(k8s, name))
        (eri,) = our_eris(emu, inst)

        emu.world.detach(eri.id, inst.id)  # someone detaches it in the console
        emu.world.transition_delay = 2.0  # so the re-attach is visibly in progress

        async def noticed() -> str | None:
            obj = await device(k8s, name)
            st = crd.parse(obj).status_of(eri.id) if obj else None
            return st.message if st and st.status == crd.PENDING else None

        message = await eventually(noticed)
        assert message == "was detached outside the controller; attaching it again"
        obj = await eventually(lambda: ready_device(k8s, name))

    assert eri.status == "InUse" and eri.card_index == 1
    assert [d["id"] for d in obj["spec"]["devices"]] == [inst.primary_eni_id, eri.id]
    assert "ERIReattaching" in {r for _, r, _ in await events(k8s, name)}


async def test_follows_instance_type_change(kube_api, emu, k8s):
    inst = emu.world.add_instance(GENERAL_ERI.name)
    async with controller(kube_api, emu):
        name = await add_node(k8s, inst)
        obj = await eventually(lambda: ready_device(k8s, name))
        assert len(obj["spec"]["devices"]) == 1

        inst.instance_type = GPU_TWO_CARDS.name  # resized in the console; kubelet relabels
        label = {"node.kubernetes.io/instance-type": GPU_TWO_CARDS.name}
        await k8s.patch(Node, name, {"metadata": {"labels": label}})

        async def two_ready() -> dict | None:
            obj = await ready_device(k8s, name)
            return obj if obj and len(obj["spec"]["devices"]) == 2 else None

        obj = await eventually(two_ready)
    assert [d["networkCardIndex"] for d in obj["spec"]["devices"]] == [0, 1]


async def test_object_deleted_by_a_person_is_recreated(kube_api, emu, k8s):
    inst = emu.world.add_instance(GENERAL_ERI.name)
    async with controller(kube_api, emu):
        name = await add_node(k8s, inst)
        old = await eventually(lambda: ready_device(k8s, name))

        await k8s.delete(ERdmaDeviceResource, name)

        async def recreated() -> dict | None:
            obj = await ready_device(k8s, name)
            return obj if obj and obj["metadata"]["uid"] != old["metadata"]["uid"] else None

        new = await eventually(recreated)
    assert new["spec"] == old["spec"]
    assert emu.world.enis[inst.primary_eni_id].status == "InUse"  # no cloud cleanup for this
