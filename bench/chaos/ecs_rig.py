"""The stage of the ECS fault scenarios: a real API server, an emulated region, the controller.

One kube-testserver serves every ECS scenario of a run (it is started on first use and stopped
when the process exits); each scenario gets a fresh ECS emulator region and an empty cluster.
The controller is the production code, run in-process (``tests.integration.controller_rig``)
with the production retry and throttle policies against the emulator over real HTTP.
"""

from __future__ import annotations

import asyncio
import atexit
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightkube import AsyncClient, KubeConfig

from erdma.controller.providers.ecs.client import EcsCloud
from erdma.controller.ratelimit import RetryPolicy, ThrottlePolicy
from erdma.kube import crd
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.audit import duplicates, eris_on, leaked
from tests.fakes.ecs.client import GENERAL_ERI, GPU_TWO_CARDS, cloud_for, standard_world
from tests.fakes.ecs.records import InstanceRecord
from tests.fakes.kubeapi import KubeApiServer, install_crd
from tests.integration.controller_rig import clear_cluster
from tests.integration.controller_support import device

# ERIs each scenario instance type must end up with: one per card it has ERI quota for.
CARDS = {GPU_TWO_CARDS.name: 2, GENERAL_ERI.name: 1}

_server: KubeApiServer | None = None


async def kube_server() -> KubeApiServer:
    """The run's API server with the ERdmaDevice CRD, started on first use (scenarios run one
    after another, so there is no race for it)."""
    global _server
    if _server is None:
        server = await asyncio.to_thread(KubeApiServer.start)
        atexit.register(server.stop)
        await install_crd(server.kubeconfig)
        _server = server
    return _server


@dataclass
class Region:
    """One scenario's world: the emulator, a client of the API server, its kubeconfig."""

    emu: EcsEmulator
    k8s: AsyncClient
    kubeconfig: Path

    def cloud(self, **overrides: Any) -> EcsCloud:
        """An ``EcsCloud`` with the production retry and throttle policies."""
        settings: dict[str, Any] = {"retry": RetryPolicy(), "throttle": ThrottlePolicy()}
        return cloud_for(self.emu, **{**settings, **overrides})


@asynccontextmanager
async def region() -> AsyncIterator[Region]:
    server = await kube_server()
    with EcsEmulator(standard_world()).in_thread() as emu:
        k8s = AsyncClient(KubeConfig.from_file(server.kubeconfig))
        try:
            await clear_cluster(k8s)
            yield Region(emu, k8s, server.kubeconfig)
        finally:
            await clear_cluster(k8s)
            await k8s.close()


async def not_whole(r: Region, nodes: Sequence[tuple[str, InstanceRecord]]) -> str:
    """Why the nodes are not whole yet ("" when they are): every node Ready with exactly one
    ERI per card, the object listing the ERIs that are attached, no duplicate, no leak."""
    for name, inst in nodes:
        obj = await device(r.k8s, name)
        if obj is None:
            return f"{name}: no ERdmaDevice"
        dev = crd.parse(obj)
        if not dev.all_ready:
            return f"{name}: {obj.get('status', {}).get('ready')} Ready"
        listed = {d.network_card_index: d.id for d in dev.devices}
        if len(listed) != CARDS[inst.instance_type] or listed != eris_on(r.emu.world, inst.id):
            return f"{name}: lists {listed}, attached {eris_on(r.emu.world, inst.id)}"
    if wrong := [f"{a} {c} x{n}" for (a, c), n in r.emu.faults.refused.items() if "State" in c]:
        return f"calls refused for an ENI's state: {', '.join(wrong)}"
    if extra := duplicates(r.emu.world):
        return f"duplicate ERIs on {extra}"
    if lost := leaked(r.emu.world):
        return f"leaked ERIs {lost}"
    return ""


async def wait_whole(r: Region, nodes: Sequence[tuple[str, InstanceRecord]], timeout: float) -> str:
    """Poll until the nodes are whole; returns "" then, else the last reason after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (why := await not_whole(r, nodes)) and loop.time() < deadline:
        await asyncio.sleep(0.1)
    return why
