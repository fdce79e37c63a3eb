"""A rolling update of the agent never leaves claims without a DRA driver.

Two `erdma agent` processes run on one node as a DaemonSet update with maxSurge runs them: the
second starts while the first still serves. Each registers with sockets of its own, so the
kubelet stand-in (which keeps every instance of a driver, as kubelet 1.33+ does) holds both and
calls the newer; when the first stops, the driver stays registered through the second. The
claim the first prepared is unprepared by the second (the checkpoint is shared), and the
node's ResourceSlice is the same object throughout: the second agent takes it over unchanged
and the first leaves it in place when it stops.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from lightkube import AsyncClient
from lightkube.resources.resource_v1 import ResourceClaim

from erdma.dra.names import DRIVER_NAME
from erdma.sim import fakehost
from erdma.sim.dra_kubelet import FakeDraKubelet
from erdma.sim.kubelet import FakeKubelet
from erdma.sim.node import agent_command
from tests.fakes.kubeapi import KubeApiServer
from tests.integration import dra_support
from tests.waiting import until

pytest_plugins = [
    "tests.integration.conftest_kubeapi",
    "tests.integration.conftest_dra_api",
]


class AgentProcess:
    """One `erdma agent` on the shared fixture host and kubelet directory, DRA on."""

    def __init__(self, root: Path, name: str, node: str, kubeconfig: Path) -> None:
        config = root / f"{name}.json"
        config.write_text(json.dumps({"dra": {"enabled": True}}))
        self.log = root / f"{name}.log"
        self.argv = agent_command(
            root / "host",
            root / "kubelet",
            *("--config", str(config), "--cdi-spec-dir", str(root / "cdi")),
            *("--kubeconfig", str(kubeconfig), "--node-name", node),
        )
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with open(self.log, "ab") as out:
            self.process = await asyncio.create_subprocess_exec(*self.argv, stdout=out, stderr=out)

    async def stop(self) -> None:
        """SIGTERM, as the kubelet stops the old pod of a rolling update."""
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 30)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()

    def said(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture
async def agents(short_root: Path) -> AsyncIterator[list[AgentProcess]]:
    started: list[AgentProcess] = []
    yield started
    for agent in started:
        await agent.stop()


async def allocated(admin: AsyncClient, node: str, device: str) -> tuple[str, str, str]:
    result = {"request": "nic", "driver": DRIVER_NAME, "pool": node, "device": device}
    return await dra_support.allocated_claim(admin, node, [result])


async def slice_of(admin: AsyncClient, node: str) -> bool:
    return bool(await dra_support.slices_of(admin, node))


async def test_the_driver_stays_registered_while_a_new_agent_replaces_the_old(
    short_root: Path,
    admin: AsyncClient,
    node: str,
    kube_api: KubeApiServer,
    agents: list[AgentProcess],
) -> None:
    fakehost.build(short_root / "host", "default")
    kept, moved = await allocated(admin, node, "erdma-0"), await allocated(admin, node, "erdma-1")
    spec = short_root / "cdi" / f"admin.{DRIVER_NAME}-claim_{kept[1]}.yaml"
    old, new = (AgentProcess(short_root, n, node, kube_api.kubeconfig) for n in ("old", "new"))
    agents += [old, new]
    async with (
        FakeKubelet(short_root / "kubelet" / "device-plugins"),
        FakeDraKubelet(short_root / "kubelet") as kubelet,
    ):
        await old.start()
        first = await kubelet.wait_registered(DRIVER_NAME, timeout=60)
        answer = (await kubelet.prepare(DRIVER_NAME, [kept])).claims[kept[1]]
        assert answer.error == "", old.said()
        await until(lambda: slice_of(admin, node), what=f"the slice; log:\n{old.said()}")
        (before,) = await dra_support.slices_of(admin, node)

        await new.start()
        await until(
            lambda: kubelet.plugins[DRIVER_NAME] is not first,
            what=f"the new agent registered beside the old; log:\n{new.said()}",
        )
        assert len(kubelet.instances[DRIVER_NAME]) == 2  # both serve
        assert first.registration_socket.exists()  # the old one's socket is untouched
        answer = (await kubelet.prepare(DRIVER_NAME, [moved])).claims[moved[1]]
        assert answer.error == "", new.said()

        await old.stop()
        await until(lambda: len(kubelet.instances[DRIVER_NAME]) == 1, what="old one gone")
        assert kubelet.unregistered == []  # never without an instance of the driver
        assert (await kubelet.unprepare(DRIVER_NAME, [kept])).claims[kept[1]].error == ""
        assert not spec.exists()  # the new agent knew the old one's claim
        (after,) = await dra_support.slices_of(admin, node)
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert after["spec"]["pool"] == before["spec"]["pool"]
        assert "ResourceSlice taken over unchanged" in new.said()

        await new.stop()
        await until(lambda: kubelet.unregistered == [DRIVER_NAME], what="the last one gone")
    for ref in (kept, moved):
        await admin.delete(ResourceClaim, ref[2], namespace="default")
