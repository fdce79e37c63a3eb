"""A prepared claim says which ERI the pod got: `status.devices` on a real API server.

The driver prepares a claim the test allocated as kube-scheduler does; `kubectl get
resourceclaim -o yaml` then shows, for each of our devices, the network interface, its MAC and
the addresses on it (read through a table here: the fixture's interfaces do not exist on this
machine) with a `Ready` condition, written by the driver's own field manager next to the
scheduler's allocation and another driver's entry, both untouched. Two shares of one device
(consumable capacity) are two entries, told apart by their shareID, in the claim's status and
in the answer to kubelet. A status write the API server refuses never fails the Prepare.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from erdma.dra.names import DRIVER_NAME
from erdma.sim import fakehost
from erdma.sim.dra_kubelet import FakeDraKubelet
from tests.fakes.kubeapi import KubeApiServer
from tests.integration import dra_support
from tests.integration import kubectl_support as kc
from tests.integration.api_fault_proxy import ApiFaultProxy, Rule, status_answer

pytest_plugins = [
    "tests.integration.conftest_kubeapi",
    "tests.integration.conftest_dra_api",
]

ERDMA_1_MAC = "00:16:3e:2f:31:11"  # the default fixture's erdma_1, on eth2
ADDRESSES = {ERDMA_1_MAC: ("192.0.2.7/24", "2001:db8::7/64")}
GPU = {"driver": "gpu.example.com", "pool": "p", "device": "gpu-0"}
FORBIDDEN = status_answer(403, "Forbidden")


def addresses(mac: str) -> tuple[str, ...]:
    return ADDRESSES.get(mac, ())


def ours(device: str, node: str, **extra: str) -> dict[str, Any]:
    return {"request": "nic", "driver": DRIVER_NAME, "pool": node, "device": device, **extra}


def kubectl_yaml(kube_api: KubeApiServer, name: str) -> dict[str, Any]:
    got = kc.kubectl(
        kube_api.kubeconfig, "get", "resourceclaim", name, "-o", "yaml", "--show-managed-fields"
    )
    assert got.returncode == 0, got.stderr
    return yaml.safe_load(got.stdout)


async def test_kubectl_shows_which_eri_the_pod_got(short_root, admin, node, kube_api):
    kc.kubectl_or_skip()
    ref = await dra_support.allocated_claim(admin, node, [ours("erdma-1", node)])
    gpu_status: Any = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": ref[2], "namespace": "default"},
        "status": {"devices": [GPU]},
    }
    await admin.patch(
        ResourceClaim.Status,
        ref[2],
        gpu_status,
        namespace="default",
        patch_type=PatchType.APPLY,
        field_manager="gpu.example.com",
        force=True,
    )
    host = fakehost.build(short_root / "host", "default")
    driver = dra_support.new_driver(short_root, host, client=admin, node=node, addresses=addresses)
    async with FakeDraKubelet(short_root / "kubelet") as kubelet, driver:
        await kubelet.wait_registered(DRIVER_NAME)
        assert (await kubelet.prepare(DRIVER_NAME, [ref])).claims[ref[1]].error == ""
        claim = kubectl_yaml(kube_api, ref[2])
        again = await kubelet.prepare(DRIVER_NAME, [ref])  # a second pod: from the checkpoint
        assert again.claims[ref[1]].error == ""
    entries = {e["device"]: e for e in claim["status"]["devices"]}
    gpu = entries["gpu-0"]  # another driver's entry, untouched
    assert (
        {k: gpu[k] for k in GPU} == GPU and not gpu.get("conditions") and "networkData" not in gpu
    )
    nic = entries["erdma-1"]
    assert (nic["driver"], nic["pool"]) == (DRIVER_NAME, node)
    assert nic["networkData"] == {
        "interfaceName": "eth2",
        "hardwareAddress": ERDMA_1_MAC,
        "ips": ["192.0.2.7/24", "2001:db8::7/64"],
    }
    (ready,) = nic["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Prepared")
    assert "erdma_1 (/dev/infiniband/uverbs1)" in ready["message"]
    assert claim["status"]["allocation"]["devices"]["results"] == [ours("erdma-1", node)]
    status_writers = {
        m["manager"] for m in claim["metadata"]["managedFields"] if m.get("subresource") == "status"
    }
    assert DRIVER_NAME in status_writers
    after = (await admin.get(ResourceClaim, ref[2], namespace="default")).to_dict()
    assert after["metadata"]["resourceVersion"] == claim["metadata"]["resourceVersion"]
    await admin.delete(ResourceClaim, ref[2], namespace="default")


async def test_two_shares_of_one_device_are_told_apart(short_root, admin, node):
    shares = [ours("erdma-0", node, shareID=str(uuid.uuid4())) for _ in range(2)]
    shares[1]["request"] = "nic2"
    ref = await dra_support.allocated_claim(admin, node, shares)
    host = fakehost.build(short_root / "host", "default")
    driver = dra_support.new_driver(short_root, host, client=admin, node=node, addresses=addresses)
    async with FakeDraKubelet(short_root / "kubelet") as kubelet, driver:
        await kubelet.wait_registered(DRIVER_NAME)
        answer = (await kubelet.prepare(DRIVER_NAME, [ref])).claims[ref[1]]
        retried = (await kubelet.prepare(DRIVER_NAME, [ref])).claims[ref[1]]  # checkpoint
    claim = (await admin.get(ResourceClaim, ref[2], namespace="default")).to_dict()
    want = {(s["request"], s["shareID"]) for s in shares}
    for got in (answer, retried):
        assert {(d.request_names[0], d.share_id) for d in got.devices} == want
        assert {d.device_name for d in got.devices} == {"erdma-0"}
    assert {e["shareID"] for e in claim["status"]["devices"]} == {s["shareID"] for s in shares}
    await admin.delete(ResourceClaim, ref[2], namespace="default")


async def test_a_status_the_api_server_refuses_does_not_fail_the_prepare(
    short_root, admin, node, kube_api, caplog
):
    """A cluster that refuses the status write (Kubernetes 1.36+ without the
    `resourceclaims/driver` grant answers 403): kubelet still gets the CDI devices, and the
    log names the claim and the refusal."""
    caplog.set_level(logging.WARNING, logger="erdma.dra.claim_status")
    ref = await dra_support.allocated_claim(admin, node, [ours("erdma-0", node)])
    status = f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{ref[2]}/status"
    host = fakehost.build(short_root / "host", "default")
    async with ApiFaultProxy(kube_api) as proxy:
        proxy.add(Rule(lambda r: r.method == "PATCH" and r.path == status, FORBIDDEN))
        refused = AsyncClient(KubeConfig.from_file(proxy.kubeconfig()))
        driver = dra_support.new_driver(short_root, host, client=refused, node=node)
        async with FakeDraKubelet(short_root / "kubelet") as kubelet, driver:
            await kubelet.wait_registered(DRIVER_NAME)
            answer = (await kubelet.prepare(DRIVER_NAME, [ref])).claims[ref[1]]
        await refused.close()
    assert answer.error == "" and [d.device_name for d in answer.devices] == ["erdma-0"]
    (record,) = [r for r in caplog.records if "status.devices not written" in r.getMessage()]
    assert ref[2] in record.claim and "403" in record.error
    await admin.delete(ResourceClaim, ref[2], namespace="default")
