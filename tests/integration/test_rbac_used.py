"""The chart's RBAC is what the programs use, no more and no less.

The rendered chart is installed on a real API server that writes an audit log; the controller
(leader election, webhooks with their certificate, a Node brought to Ready and deleted), the
uninstall hook's command and a Regular-mode agent then run under their ServiceAccounts' names.
Every request they make must be granted by the rules the chart binds to that ServiceAccount,
and every (resource, verb) those rules grant must have been used, apart from the few listed in
``UNEXERCISED`` with the reason the scenario cannot reach them.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from lightkube import AsyncClient, KubeConfig

from erdma.controller.config import parse_config
from erdma.controller.main import run_controller
from erdma.kube import crd
from erdma.kube.client import KubeApi, new_client
from erdma.sim.node import SimulatedNode
from erdma.tools.finalizers import drop_all
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GPU_TWO_CARDS, cloud_for, standard_world
from tests.fakes.kubeapi import KubeApiServer
from tests.fakes.ports import free_port
from tests.helm_support import ACCESS_KEY, Rendered, merge, render
from tests.integration import kubectl_support as kc
from tests.integration.controller_rig import delete_node, object_gone
from tests.integration.controller_support import FAST, add_node, eventually, ready_device
from tests.integration.helm_cases import AGENT, CONTROLLER
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
VALUES = merge(ACCESS_KEY, {"smcr": {"mode": "webhook"}, "sharedRdma": {"enabled": True}})

#: (role, resource, verb) granted for paths these scenarios cannot reach, and why.
_REPEAT = (
    "EventRecorder patches an Event's count only when the same reason and message recur on a "
    "Node within one process; the scenarios' Events happen once (ECS failures even carry a "
    "RequestId)"
)
UNEXERCISED: dict[tuple[str, str, str], str] = {
    (f"ClusterRole/{CONTROLLER}", "events", "patch"): _REPEAT,
    (f"ClusterRole/{AGENT}", "events", "patch"): _REPEAT,
    (f"ClusterRole/{AGENT}", "events", "create"): (
        "the agent posts Events on driver readiness and device health changes; the simulated "
        "node runs with --no-prepare-node and healthy devices (test_agent_events.py posts them)"
    ),
}


def account(out: Rendered, kind: str, name: str) -> str:
    return str(out.get(kind, name)["spec"]["template"]["spec"]["serviceAccountName"])


async def controller_scenario(
    api: KubeApiServer, out: Rendered, kubeconfig: Path, port: int, tmp: Path
) -> None:
    """Leader election, webhook certificate and caBundle, one Node to Ready and deleted,
    another left for the uninstall hook's command to release."""
    config = json.loads(out.config_file(CONTROLLER, "config.json"))
    config.update(FAST, webhookPort=port, certDir=str(tmp / "certs"))
    admin = AsyncClient(KubeConfig.from_file(api.kubeconfig))
    stop = asyncio.Event()
    with EcsEmulator(standard_world()).in_thread() as emu:
        task = asyncio.create_task(run_controller(
            parse_config(config), cloud_for(emu), kubeconfig=kubeconfig,
            leader_elect=True, identity="rbac-test", stop=stop,
        ))  # fmt: skip
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
    hook = KubeApi(new_client(kubeconfig))
    try:
        assert await drop_all(hook) == (1, 0)
    finally:
        await hook.close()
    await admin.close()


async def agent_scenario(api: KubeApiServer, kubeconfig: Path, root: Path) -> None:
    """A Regular-mode agent waiting for its node's ERdmaDevice and exposing it once Ready."""
    node_name = "rbac-agent-node"
    eri = crd.DeviceInfo(
        id="eni-bp1rbac0001", mac="00:16:3e:2f:31:11", instance_id="i-bp1rbac",
        network_card_index=0, is_primary_eni=True, queue_pair=8,
    )  # fmt: skip
    obj = crd.build(node_name, "uid-rbac", "i-bp1rbac", [eri], jumbo_frame=False)
    del obj["metadata"]["ownerReferences"], obj["metadata"]["finalizers"]
    admin = KubeApi(new_client(api.kubeconfig))
    args = ["--no-local-eri-discovery", "--node-name", node_name,
            "--kubeconfig", str(kubeconfig), "--slots-per-device", "2"]  # fmt: skip
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


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Rendered, list[Request]]:
    """The chart installed, both scenarios run, and the requests they made."""
    kc.kubectl_or_skip()
    tmp, port = tmp_path_factory.mktemp("rbac"), free_port()
    args, log = audit_args(tmp)
    endpoints = {f"{NS}/{CONTROLLER}": f"127.0.0.1:{port}"}
    api = api_server_or_skip(service_endpoints=endpoints, args=args)
    out = render(VALUES, namespace=NS)
    users = {
        name: service_account_user(NS, account(out, kind, name))
        for kind, name in (("Deployment", CONTROLLER), ("DaemonSet", AGENT))
    }
    with api:
        kc.install(api.kubeconfig, out)
        configs = {
            n: identity_kubeconfig(api, u, tmp / f"{n}.kubeconfig") for n, u in users.items()
        }
        asyncio.run(controller_scenario(api, out, configs[CONTROLLER], port, tmp))
        asyncio.run(agent_scenario(api, configs[AGENT], tmp / "node"))
        return out, read_audit(log, users.values())


@pytest.mark.parametrize("program", [CONTROLLER, AGENT])
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
