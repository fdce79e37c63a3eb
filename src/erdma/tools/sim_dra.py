"""`erdma sim --dra`: the DRA driver on a fixture host, narrated step by step.

It builds the fixture host, starts the real `DraDriver` and the fake kubelet (plugin-watcher
registration and the DRA v1 proto over unix sockets), shows the ResourceSlice (sent to the API
server of `--kubeconfig` when given, else only computed), and with an API server restarts the
kubelet, which deletes the node's slices as the real one does, to show the driver restore its
own. It then shows a one-NIC claim (by a CEL selector, on the PCIe root of the first GPU that
shares one with a NIC), the device kube-scheduler's structured allocator gives it (the first
device of the slice the selector admits: the rule is played here, and the tests check it
against the real scheduler), prepares it, prints the per-claim CDI spec kubelet's runtime
would inject, and unprepares it.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import uuid
from pathlib import Path
from typing import Any

import click
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from erdma.agent.health import device_health
from erdma.agent.nccl import NcclConfig, nccl_env
from erdma.dra import DraConfig, DraDriver, pcie_root_or_none
from erdma.dra.devices import slice_devices
from erdma.dra.names import DRIVER_NAME
from erdma.dra.slices import build_slice
from erdma.host.devices import scan
from erdma.host.driver import choose_mode
from erdma.kube.client import new_client
from erdma.sim import fakehost
from erdma.sim.dra_kubelet import FakeDraKubelet

NODE = "sim-node"
#: how long the narration waits for the restored slice before it says it is missing (generous:
#: a loaded machine must not make the demo report a restore that is only late)
RESTORE_WAIT = 30.0


def _say(text: str = "") -> None:
    click.echo(text)


def nic_request(pcie_root: str | None) -> dict[str, Any]:
    """The demo's claim request: one NIC of the driver's class, on the first GPU's PCIe root
    when the host has GPUs (a CEL selector on the standard attribute, as a user writes it)."""
    exactly: dict[str, Any] = {
        "deviceClassName": DRIVER_NAME,
        "allocationMode": "ExactCount",
        "count": 1,
    }
    if pcie_root is not None:
        where = f'device.attributes["resource.kubernetes.io"].pcieRoot == "{pcie_root}"'
        exactly["selectors"] = [{"cel": {"expression": where}}]
    return {"name": "nic", "exactly": exactly}


def first_admitted(devices: list[dict[str, Any]], pcie_root: str | None) -> str | None:
    """The device kube-scheduler's structured allocator gives `nic_request` on this node: with
    no other claim, the first device of the slice, in its order, that the selector admits."""
    for device in devices:
        root = device["attributes"].get("resource.kubernetes.io/pcieRoot", {}).get("string")
        if pcie_root is None or root == pcie_root:
            return str(device["name"])
    return None


def _claim(uid: str, device: str) -> dict[str, Any]:
    """The claim as kube-scheduler leaves it (status.allocation.devices.results)."""
    result = {"request": "nic", "driver": DRIVER_NAME, "pool": NODE, "device": device}
    return {
        "metadata": {"name": "nic", "namespace": "default", "uid": uid},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


async def _ensure_node(client: AsyncClient) -> None:
    """The simulated node's Node object, the slice's owner."""
    try:
        await client.create(Node(metadata=ObjectMeta(name=NODE)))
    except ApiError as exc:
        if exc.status.code != 409:
            raise


async def _uid(client: AsyncClient, name: str) -> str | None:
    try:
        found = await client.get(ResourceSlice, name)
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise
    return found.metadata.uid if found.metadata else None


async def _kubelet_restart(client: AsyncClient, kubelet: FakeDraKubelet, name: str) -> None:
    """Restart the kubelet, which deletes the node's slices, and show the driver restore ours."""
    before = await _uid(client, name)
    await kubelet.restart()
    _say(f"\n== kubelet restarts: deletes this node's ResourceSlices {kubelet.wiped[-1]}")
    loop = asyncio.get_running_loop()
    start, deadline = loop.time(), loop.time() + RESTORE_WAIT
    while await _uid(client, name) in (None, before):
        if loop.time() > deadline:
            _say(f"   ResourceSlice {name} NOT restored within {RESTORE_WAIT:g}s")
            return
        await asyncio.sleep(0.01)
    took = (loop.time() - start) * 1000
    _say(f"   the driver's watch saw the deletion: {name} restored after {took:.0f} ms")


async def run_dra_sim(variant: str, kubeconfig: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="erdma-sim-dra-", dir="/tmp") as tmp:
        root = Path(tmp)
        host = fakehost.build(root / "host", variant)
        snapshot = scan(host.root)
        mode, why = choose_mode("", snapshot.gpus)
        client = new_client(kubeconfig) if kubeconfig else None
        claims: dict[tuple[str, str], dict[str, Any]] = {}

        async def get_claim(namespace: str, name: str) -> dict[str, Any] | None:
            return claims.get((namespace, name))

        driver = DraDriver(
            DraConfig(enabled=True, device_kinds=["erdma", "mlx5"]),
            node_name=NODE,
            host_root=host.root,
            kubelet_dir=root / "kubelet",
            cdi_dir=root / "cdi",
            client=client,
            health=device_health,
            mode=mode.value,
            get_claim=get_claim,
            extra_env=lambda ds: nccl_env(ds, mode, NcclConfig()).envs,
        )
        driver.publish(snapshot)
        _say(f"== simulated node ({variant} fixture), driver mode {mode.value} ({why})")
        devices = slice_devices(driver.devices, driver.config, mode.value)
        body = build_slice(NODE, "<node uid>", DRIVER_NAME, 1, devices)
        if client is not None:
            await _ensure_node(client)
        kubelet = FakeDraKubelet(root / "kubelet", client=client, node_name=NODE)
        async with kubelet, driver:
            plugin = await kubelet.wait_registered(DRIVER_NAME)
            _say(
                f"\n== kubelet: {DRIVER_NAME} registered (DRA {plugin.version}, {plugin.endpoint})"
            )
            if client is not None:
                await driver.wait_published()
                _say(f"\n== ResourceSlice {body['metadata']['name']} applied to the API server")
            else:
                _say("\n== ResourceSlice (no --kubeconfig: computed, not sent)")
            _say(f"   driver {DRIVER_NAME}, pool {json.dumps(body['spec']['pool'])}")
            for device in devices:
                attrs = ", ".join(
                    f"{k}={next(iter(v.values()))}" for k, v in device["attributes"].items()
                )
                _say(f"   {device['name']}: {attrs}")
            if client is not None:
                await _kubelet_restart(client, kubelet, body["metadata"]["name"])
                await kubelet.wait_registered(DRIVER_NAME)  # again, with the new kubelet
            if not devices:
                _say("\nno devices to allocate on this host")
                return
            gpu_roots = [pcie_root_or_none(host.root, g.pci_address) for g in snapshot.gpus]
            nic_roots = {d.pcie_root for d in driver.devices.values()}
            shared = next((r for r in gpu_roots if r is not None and r in nic_roots), None)
            request = nic_request(shared)
            chosen = first_admitted(devices, shared)
            _say(f"\n== claim default/nic asks for {json.dumps(request)}")
            if snapshot.gpus and shared is None:
                _say("   (no GPU shares a PCIe root with a NIC here: the claim asks for any NIC)")
            if chosen is None:
                _say("   no device of the slice admits it: the scheduler leaves the pod Pending")
                return
            uid = str(uuid.uuid4())
            claims[("default", "nic")] = _claim(uid, chosen)
            _say(
                f"   the scheduler allocates {chosen}: the first device of the slice the request "
                "admits (kube-scheduler's rule for a lone claim; played here, not run)"
            )
            response = await kubelet.prepare(DRIVER_NAME, [("default", uid, "nic")])
            result = response.claims[uid]
            _say(
                f"   NodePrepareResources: {list(result.devices[0].cdi_device_ids)} {result.error}"
            )
            spec_path = Path(driver.prepared[uid].spec_file)
            _say(f"\n== CDI spec {spec_path.name}\n{spec_path.read_text()}")
            await kubelet.unprepare(DRIVER_NAME, [("default", uid, "nic")])
            _say(f"== NodeUnprepareResources: spec removed: {not spec_path.exists()}")
        if client is not None:
            await client.close()
