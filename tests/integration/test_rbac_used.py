"""The chart's RBAC is what the programs use, no more and no less.

The rendered chart is installed on a real API server that writes an audit log; the controller
(leader election, webhooks with their certificate, a Node brought to Ready and deleted), the
uninstall hook's command (finalizers, the DRA driver's slices) and a Regular-mode agent then run
under their ServiceAccounts' names.
Every request they make must be granted by the rules the chart binds to that ServiceAccount,
and every (resource, verb) those rules grant must have been used, apart from the few listed in
``UNEXERCISED`` with the reason the scenario cannot reach them.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice
from lightkube.types import PatchType

from erdma.agent.config import build_config
from erdma.agent.driver_unit import prepare_once
from erdma.controller.config import parse_config
from erdma.controller.main import run_controller
from erdma.dra import DraConfig
from erdma.dra.names import DRIVER_NAME
from erdma.host.run import RecordingRunner
from erdma.kube import crd
from erdma.kube.client import KubeApi, new_client
from erdma.sim import fakehost
from erdma.sim.dra_kubelet import FakeDraKubelet
from erdma.sim.fakecmds import KmodCommands
from erdma.sim.node import SimulatedNode
from erdma.tools.finalizers import delete_slices, drop_all
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GPU_TWO_CARDS, cloud_for, standard_world
from tests.fakes.kubeapi import KubeApiServer
from tests.fakes.ports import free_port
from tests.helm_support import ACCESS_KEY, Rendered, merge, render
from tests.integration import dra_support
from tests.integration import kubectl_support as kc
from tests.integration.controller_rig import delete_node, object_gone
from tests.integration.controller_support import FAST, add_node, eventually, ready_device
from tests.integration.helm_cases import AGENT, CONTROLLER, DRIVER
from tests.integration.rbac_audit import (
    Request,
    Rule,
    audit_args,
    identity_kubeconfig,
    read_audit,
    rules_for,
    service_account_user,
    split_rules,
)
from tests.kubeapi_support import api_server_or_skip

NS = "kube-system"
#: both webhooks; kube-testserver serves no ValidatingAdmissionPolicy, which `auto` would choose
VALUES = merge(
    ACCESS_KEY,
    {
        "smcr": {"mode": "webhook"},
        "sharedRdma": {"enabled": True, "admissionPolicy": False},
        # the DRA driver's rules too, without its node-restricting policy for the same reason
        "dra": {"enabled": True, "nodeRestriction": False},
    },
)

#: (role, resource, verb) granted for paths these scenarios cannot reach, and why.
_REPEAT = (
    "EventRecorder patches an Event's count only when the same reason and message recur on a "
    "Node within one process; the scenarios' Events happen once (ECS failures even carry a "
    "RequestId)"
)
UNEXERCISED: dict[tuple[str, str, str], str] = {
    (f"ClusterRole/{CONTROLLER}", "events", "patch"): _REPEAT,
    (f"ClusterRole/{AGENT}", "events", "patch"): _REPEAT,
    (f"ClusterRole/{DRIVER}", "events", "patch"): _REPEAT,
    (f"ClusterRole/{AGENT}-dra", "resourceslices", "create"): (
        "a server-side apply that creates the slice is audited as patch; the API server "
        "authorizes it for create as well, so the grant is needed all the same"
    ),
    (f"ClusterRole/{AGENT}", "events", "create"): (
        "the agent posts Events on driver readiness and device health changes; the simulated "
        "node runs with --no-prepare-node and healthy devices (test_agent_events.py posts them)"
    ),
    (f"ClusterRole/{AGENT}-dra", "resourceclaims/driver", "associated-node:patch"): (
        "a synthetic subresource: Kubernetes 1.36+ checks it inside the status patch of a "
        "claim (audited as patch resourceclaims/status, which the scenario makes), never as a "
        "request of its own; the test server does not authorize"
    ),
}


def account(out: Rendered, kind: str, name: str) -> str:
    return str(out.get(kind, name)["spec"]["template"]["spec"]["serviceAccountName"])


async def controller_scenario(
    api: KubeApiServer, out: Rendered, kubeconfig: Path, port: int, tmp: Path
) -> None:
    """Leader election, webhook certificate and caBundle, one Node to Ready and deleted,
    another left for the uninstall hook's command to release, and a node's DRA slice left for
    it to delete."""
    config = json.loads(out.config_file(CONTROLLER, "config.json"))
    config.update(FAST, webhookPort=port, certDir=str(tmp / "certs"))
    admin = AsyncClient(KubeConfig.from_file(api.kubeconfig))
    stop = asyncio.Event()
    with EcsEmulator(standard_world()).in_thread() as emu:
        task = asyncio.create_task(
            run_controller(
                parse_config(config),
                cloud_for(emu),
                kubeconfig=kubeconfig,
                leader_elect=True,
                identity="rbac-test",
                stop=stop,
            )
        )
        try:
            gone = await add_node(admin, emu.world.add_instance(GPU_TWO_CARDS.name))
            kept = await add_node(admin, emu.world.add_instance(GPU_TWO_CARDS.name))
            await eventually(lambda: ready_device(admin, gone), 30)
            await eventually(lambda: ready_device(admin, kept), 30)
            await delete_node(admin, gone)
            await object_gone(admin, gone)
        finally:
            stop.set()
            await asyncio.wait_for(task, timeout=30)
    left: Any = ResourceSlice.from_dict(
        {
            "metadata": {"name": "rbac-down-node-slice"},
            "spec": {
                "driver": DRIVER_NAME,
                "nodeName": "rbac-down-node",
                "pool": {"name": "rbac-down-node", "generation": 1, "resourceSliceCount": 1},
                "devices": [],
            },
        }
    )
    await admin.create(left)
    hook = KubeApi(new_client(kubeconfig))
    try:
        assert await drop_all(hook) == (1, 0)
        assert await delete_slices(hook.client, DRIVER_NAME) == 1
    finally:
        await hook.close()
    await admin.close()


async def agent_scenario(api: KubeApiServer, kubeconfig: Path, root: Path) -> None:
    """A Regular-mode agent waiting for its node's ERdmaDevice and exposing it once Ready."""
    node_name = "rbac-agent-node"
    eri = crd.DeviceInfo(
        id="eni-bp1rbac0001",
        mac="00:16:3e:2f:31:11",
        instance_id="i-bp1rbac",
        network_card_index=0,
        is_primary_eni=True,
        queue_pair=8,
    )
    obj = crd.build(node_name, "uid-rbac", "i-bp1rbac", [eri], jumbo_frame=False)
    del obj["metadata"]["ownerReferences"], obj["metadata"]["finalizers"]
    admin = KubeApi(new_client(api.kubeconfig))
    args = [
        "--no-local-eri-discovery",
        "--node-name",
        node_name,
        "--kubeconfig",
        str(kubeconfig),
        "--slots-per-device",
        "2",
    ]
    node = SimulatedNode(root, "default", args)
    try:
        await node.start()
        await node.wait_registered("aliyun/erdma")
        await admin.create_device(obj)
        ready = crd.status_body([crd.DeviceStatus(eri.id, "Ready")])
        await admin.patch_device_status(node_name, ready)
        await node.kubelet.wait_for(
            lambda: bool(node.kubelet.latest("aliyun/erdma")), 15, node.agent_log()
        )
    finally:
        await node.stop()
        await admin.delete_device(node_name)
        await admin.close()


async def dra_scenario(api: KubeApiServer, kubeconfig: Path, root: Path) -> None:
    """The agent's DRA driver publishes its node's slice, restores it after a kubelet restart
    deleted it, prepares a claim (writing its status.devices) and unprepares it, and, with
    deleteSlicesOnStop, withdraws the slice when it stops."""
    node_name = "rbac-dra-node"
    admin = AsyncClient(KubeConfig.from_file(api.kubeconfig), field_manager="test")
    agent = new_client(kubeconfig)
    await admin.create(Node(metadata=ObjectMeta(name=node_name)))
    request = {"name": "nic", "exactly": {"deviceClassName": DRIVER_NAME}}
    claim: Any = ResourceClaim.from_dict(
        {
            "metadata": {"name": "rbac-claim", "namespace": "default"},
            "spec": {"devices": {"requests": [request]}},
        }
    )
    uid = (await admin.create(claim)).metadata.uid
    status = {"status": dra_support.allocation(node_name, [("nic", "erdma-0")])}
    await admin.patch(
        ResourceClaim.Status,
        "rbac-claim",
        status,
        namespace="default",
        patch_type=PatchType.MERGE,
    )
    host = fakehost.build(root / "host", "default")
    withdraw = DraConfig(enabled=True, delete_slices_on_stop=True)  # the grant's delete, used
    driver = dra_support.new_driver(root, host, client=agent, node=node_name, config=withdraw)
    kubelet = FakeDraKubelet(root / "kubelet", client=admin, node_name=node_name)
    try:
        async with kubelet, driver:
            await driver.wait_published()
            (before,) = await dra_support.slices_of(admin, node_name)
            await kubelet.restart()  # deletes the slice; the driver's watch restores it

            async def restored() -> bool:
                uids = [s["metadata"]["uid"] for s in await dra_support.slices_of(admin, node_name)]
                return uids not in ([], [before["metadata"]["uid"]])

            await eventually(restored, 60)
            await kubelet.wait_registered(DRIVER_NAME)
            claims = [("default", uid, "rbac-claim")]
            assert (await kubelet.prepare(DRIVER_NAME, claims)).claims[uid].error == ""
            await kubelet.unprepare(DRIVER_NAME, claims)
        assert await dra_support.slices_of(admin, node_name) == []  # withdrawn on stop
    finally:
        await admin.delete(ResourceClaim, "rbac-claim", namespace="default")
        await admin.delete(Node, node_name)
        await agent.close()
        await admin.close()


async def driver_scenario(api: KubeApiServer, kubeconfig: Path, root: Path) -> None:
    """`erdma driver prepare` on a node whose driver is in place: it reads its Node and says
    on it that erdma is ready, then exits."""
    node_name = "rbac-driver-node"
    admin = AsyncClient(KubeConfig.from_file(api.kubeconfig))
    await admin.create(Node(metadata=ObjectMeta(name=node_name)))
    host = fakehost.build(root / "host", "default")
    runner = RecordingRunner(handlers=[KmodCommands(host)])
    config = build_config(
        environ={},
        flags={
            "host_root": host.root,
            "node_name": node_name,
            "kubeconfig": str(kubeconfig),
            "prefer_driver": "default",
        },
    )
    try:
        assert (await prepare_once(config, root / "prepared.json", runner)).ready
    finally:
        await admin.delete(Node, node_name)
        await admin.close()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Rendered, list[Request]]:
    """The chart installed, the scenarios run, and the requests they made."""
    kc.kubectl_or_skip()
    tmp, port = tmp_path_factory.mktemp("rbac"), free_port()
    args, log = audit_args(tmp)
    endpoints = {f"{NS}/{CONTROLLER}": f"127.0.0.1:{port}"}
    api = api_server_or_skip(service_endpoints=endpoints, args=args)
    out = render(VALUES, namespace=NS)
    users = {
        name: service_account_user(NS, account(out, kind, name))
        for kind, name in (("Deployment", CONTROLLER), ("DaemonSet", AGENT), ("DaemonSet", DRIVER))
    }
    with api:
        kc.install(api.kubeconfig, out)
        configs = {
            n: identity_kubeconfig(api, u, tmp / f"{n}.kubeconfig") for n, u in users.items()
        }
        asyncio.run(controller_scenario(api, out, configs[CONTROLLER], port, tmp))
        asyncio.run(agent_scenario(api, configs[AGENT], tmp / "node"))
        asyncio.run(driver_scenario(api, configs[DRIVER], tmp / "driver"))
        with tempfile.TemporaryDirectory(prefix="erdma-rbac-", dir="/tmp") as short:
            asyncio.run(dra_scenario(api, configs[AGENT], Path(short)))  # unix socket paths
        return out, read_audit(log, users.values())


@pytest.mark.parametrize("program", [CONTROLLER, AGENT, DRIVER])
def test_every_request_is_granted_and_every_grant_is_used(
    recorded: tuple[Rendered, list[Request]], program: str
) -> None:
    out, requests = recorded
    kind = "Deployment" if program == CONTROLLER else "DaemonSet"
    name = account(out, kind, program)
    mine = [r for r in requests if r.user == service_account_user(NS, name)]
    rules = rules_for(out, NS, name)
    assert mine, f"{program} made no request the audit log recorded"
    refused = sorted({str(r) for r in mine if not any(rule.allows(r) for rule in rules)})
    assert not refused, f"{program} needs what its RBAC does not grant: {refused}"
    unused = [
        f"{rule}: {verb} {resource}"
        for rule, resource, verb in split_rules(rules)
        if (rule.role, resource, verb) not in UNEXERCISED
        and not any(_used(rule, r, resource, verb) for r in mine)
    ]
    assert not unused, f"{program}: granted, never used: {unused}"


def _used(rule: Rule, request: Request, resource: str, verb: str) -> bool:
    return request.resource == resource and request.verb == verb and rule.allows(request)
