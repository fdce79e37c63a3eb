"""`erdma sim`: the main job on a simulated node, for `make demo` and for people evaluating us.

It builds a fixture host, starts the fake kubelet, runs the real `erdma agent` process against
both, and narrates what kubelet sees: registration, capacity per NUMA node, an Allocate for a
sample pod, and health following ports that go down and come back. The `lingjun` variant runs
the shared `rdma/hca` resource instead of `aliyun/erdma`. `--dra` runs the DRA driver instead
(erdma.tools.sim_dra): ResourceSlice, a claim's allocation, the prepared CDI spec.
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


def _show_capacity(node: SimulatedNode, resource: str) -> None:
    total = sum(c for c, _ in node.capacity_by_numa(resource).values())
    shown = f"{total // 1000}k" if total and total % 1000 == 0 else str(total)
    _say(f"   node capacity {resource}: {shown}")
    for numa, (capacity, allocatable) in node.capacity_by_numa(resource).items():
        _say(f"   NUMA {numa}: capacity {capacity}, allocatable {allocatable}")


async def _health_round(node: SimulatedNode, resource: str, devices: list[str]) -> None:
    def first_slot_is(health: str) -> bool:
        listed = node.kubelet.latest(resource) or {}
        return bool(listed) and next(iter(listed.values())) == health

    for active, health in ((False, "Unhealthy"), (True, "Healthy")):
        for device in devices:
            node.host.set_port_state(device, active)
        await node.kubelet.wait_for(lambda h=health: first_slot_is(h), 5)  # type: ignore[misc]
        state = "back ACTIVE" if active else "DOWN"
        _say(f"\n== port of {', '.join(devices)} {state}: kubelet sees")
        _show_capacity(node, resource)


async def _show_preparation(node: SimulatedNode) -> None:
    """The agent's node preparation, run against the fixture's kmod (nothing touches this host)."""
    runner = RecordingRunner(handlers=[KmodCommands(node.host)])
    result = await prepare(runner, node.host_root)
    _say(f"\n== driver mode: {result.mode.value} ({result.reason})")
    for line in (*result.actions, *result.notes):
        _say(f"   {line}")
    for argv in runner.calls:
        _say(f"   ran: {' '.join(argv)}")


async def _narrate(node: SimulatedNode, variant: str, resource: str) -> None:
    _say(f"== fixture host ({variant}): what the agent discovers")
    _say(render_table(scan(node.host_root)))
    if resource == ERDMA:
        await _show_preparation(node)
    await node.start()
    await node.wait_registered(resource)
    reg = next(r for r in node.kubelet.registrations if r.resource_name == resource)
    _say(f"\n== kubelet: {resource} registered (endpoint {reg.endpoint})")
    _show_capacity(node, resource)

    listed = node.kubelet.latest(resource) or {}
    available = [device_id for device_id, health in listed.items() if health == "Healthy"]
    if not available:
        why = f"all {len(listed)} IDs are Unhealthy" if listed else "the agent found no device"
        _say(f"\n== no device is listed Healthy ({why}): a pod asking for {resource} would stay")
        _say("   Pending here; `erdma doctor` on the node says why and what to do")
        return
    admitted = await DeviceManager(node.kubelet).admit("sample-pod-uid", "main", resource, 1)
    ids, container = admitted.ids, admitted.response
    _say(f"\n== sample pod asks for {resource}: 1 -> {ids}")
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
    help="Which fixture host to simulate.",
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
