"""`erdma sim`: the main job on a simulated node, for `make demo` and for people evaluating us.

It builds a simulated node (a `/sys`, `/dev`, `/proc` tree with RDMA devices), starts the
fake kubelet, runs the real `erdma agent` process against both, and narrates what a Kubernetes
user would see: registration, the node's capacity and allocatable as `kubectl describe node`
shows them (and why that number), an Allocate for a sample pod, and health following ports that
go down and come back. The words are Kubernetes' own, and what ran only against the simulated
node says so. The `lingjun` variant runs the shared `rdma/hca` resource instead of
`aliyun/erdma`. `--dra` runs the DRA driver instead (erdma.tools.sim_dra): ResourceSlice, a
claim's allocation, the prepared CDI spec.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import click

from erdma.agent.prepare import prepare
from erdma.api.names import ERDMA_RESOURCE as ERDMA
from erdma.api.names import SHARED_RESOURCE as SHARED
from erdma.host.devices import scan
from erdma.host.run import RecordingRunner
from erdma.sim import fakehost
from erdma.sim.admission import DeviceManager
from erdma.sim.fakecmds import KmodCommands
from erdma.sim.node import SimulatedNode
from erdma.tools.devices import render_table


def _say(text: str = "") -> None:
    click.echo(text)


def _quantity(count: int) -> str:
    """A count as kubectl prints a quantity: 1000 is `1k`."""
    return f"{count // 1000}k" if count and count % 1000 == 0 else str(count)


def _show_node(node: SimulatedNode, resource: str, why: str = "") -> None:
    """The resource on the node as `kubectl describe node` shows it (allocatable counts the
    Healthy IDs only), ``why`` that number, then per NUMA node, which kubelet's Topology
    Manager aligns with CPUs and GPUs."""
    by_numa = node.capacity_by_numa(resource)
    capacity = sum(c for c, _ in by_numa.values())
    allocatable = sum(a for _, a in by_numa.values())
    _say(f"   Capacity:\n     {resource}:  {_quantity(capacity)}")
    _say(f"   Allocatable:\n     {resource}:  {_quantity(allocatable)}")
    if why:
        _say(f"   {why}")
    for numa, (on_numa, healthy) in by_numa.items():
        _say(f"   NUMA {numa}: capacity {on_numa}, allocatable {healthy}")


def _why_capacity(node: SimulatedNode, resource: str) -> str:
    """Where the node's number comes from: devices x slots, or a shared resource's capacity."""
    ids = list(node.kubelet.latest(resource) or {})
    if resource != ERDMA:
        return (
            f"{_quantity(len(ids))} = the capacity of the shared resource {resource} "
            f"(sharedResources[].capacity): up to {len(ids)} containers share its HCAs"
        )
    devices = sorted({device_id.rpartition("/")[0] for device_id in ids})
    slots = len(ids) // len(devices) if devices else 0
    return (
        f"{len(ids)} = {len(devices)} devices ({', '.join(devices)}) x {slots} slots "
        f"(slotsPerDevice): up to {slots} containers share each device"
    )


def _what_id(resource: str, device_id: str) -> str:
    """What a device ID that kubelet allocated stands for."""
    if resource != ERDMA:
        return f"{device_id} is one slot of {resource} (each slot gives every selected HCA)"
    device, _, slot = device_id.rpartition("/")
    return f"{device_id} is slot {slot} of device {device} (IDs are <device>/<slot>)"


async def _health_round(node: SimulatedNode, resource: str, devices: list[str]) -> None:
    def first_slot_is(health: str) -> bool:
        listed = node.kubelet.latest(resource) or {}
        return bool(listed) and next(iter(listed.values())) == health

    for active, health in ((False, "Unhealthy"), (True, "Healthy")):
        for device in devices:
            node.host.set_port_state(device, active)
        await node.kubelet.wait_for(lambda h=health: first_slot_is(h), 5)  # type: ignore[misc]
        state = "back ACTIVE" if active else "DOWN"
        _say(f"\n== port of {', '.join(devices)} {state}: its IDs are {health}, kubelet sees")
        _show_node(node, resource)


#: why a helper module the driver mode loads may be missing without harm
OPTIONAL_MODULE = (
    "nvidia_peermem is optional: without it NCCL still uses eRDMA but copies GPU buffers "
    "through host memory (no GPUDirect RDMA); the node's NVIDIA driver provides it"
)


async def _show_preparation(node: SimulatedNode) -> None:
    """The agent's node preparation, run against the simulated node's kmod: nothing touches
    this machine, and the narration says so."""
    runner = RecordingRunner(handlers=[KmodCommands(node.host)])
    result = await prepare(runner, node.host_root)
    _say(f"\n== driver mode: {result.mode.value} ({result.reason}), on the simulated node")
    for line in (*result.actions, *result.notes):
        _say(f"   {line}")
    if result.mode.wants_peermem and not node.host.module_loaded("nvidia_peermem"):
        _say(f"   {OPTIONAL_MODULE}")
    for argv in runner.calls:
        _say(f"   ran on the simulated node only (not on this machine): {' '.join(argv)}")


async def _narrate(node: SimulatedNode, variant: str, resource: str) -> None:
    _say(f"== simulated node ({variant}): the RDMA devices the agent discovers on it")
    _say(render_table(scan(node.host_root)))
    if resource == ERDMA:
        await _show_preparation(node)
    await node.start()
    await node.wait_registered(resource)
    reg = next(r for r in node.kubelet.registrations if r.resource_name == resource)
    _say(f"\n== kubelet: {resource} registered (endpoint {reg.endpoint})")
    _say("   `kubectl describe node` would show:")
    _show_node(node, resource, _why_capacity(node, resource))

    listed = node.kubelet.latest(resource) or {}
    available = [device_id for device_id, health in listed.items() if health == "Healthy"]
    if not available:
        why = f"all {len(listed)} IDs are Unhealthy" if listed else "the agent found no device"
        _say(f"\n== no device is listed Healthy ({why}): a pod asking for {resource} would stay")
        _say("   Pending here; `erdma doctor` on the node says why and what to do")
        return
    admitted = await DeviceManager(node.kubelet).admit("sample-pod-uid", "main", resource, 1)
    ids, container = admitted.ids, admitted.response
    _say(f"\n== sample pod asks for {resource}: 1 -> kubelet allocates {ids}")
    _say(f"   {_what_id(resource, ids[0])}; the container gets:")
    for spec in container.devices:
        _say(f"   device {spec.host_path} ({spec.permissions})")
    for key, value in sorted(container.envs.items()):
        _say(f"   env {key}={value}")

    if resource == ERDMA:
        devices = [ids[0].rpartition("/")[0]]
    else:
        devices = [d.name for d in scan(node.host_root).devices]
    await _health_round(node, resource, devices)


@click.command("sim")
@click.option(
    "--variant",
    type=click.Choice(sorted(fakehost.VARIANTS)),
    default="default",
    show_default=True,
    help="Which node to simulate.",
)
@click.option("--dra", is_flag=True, help="Show the DRA driver: slice, claim, CDI spec.")
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False),
    default=None,
    help="With --dra: publish the slice to this API server (else shown, not sent).",
)
def sim_command(variant: str, dra: bool, kubeconfig: str | None) -> None:
    """Run the agent on a simulated node and show what kubelet sees."""
    if kubeconfig and not dra:
        raise click.UsageError(
            "--kubeconfig is used only with --dra (the DRA driver publishes its ResourceSlice "
            "there); the device-plugin simulation needs no API server"
        )
    if dra:
        from erdma.tools.sim_dra import run_dra_sim

        asyncio.run(run_dra_sim(variant, kubeconfig))
        return
    shared = variant == "lingjun"
    resource = SHARED if shared else ERDMA
    args = ["--resources", "shared"] if shared else []

    async def main() -> None:
        with tempfile.TemporaryDirectory(prefix="erdma-sim-") as tmp:
            node = SimulatedNode(Path(tmp), variant, args)
            try:
                await _narrate(node, variant, resource)
            finally:
                await node.stop()

    asyncio.run(main())
