"""A resource the agent does not know, registered by a test: kubelet gets it like the built-in
ones (registration, ListAndWatch, Allocate over real gRPC), next to `aliyun/erdma`."""

from __future__ import annotations

import asyncio
from pathlib import Path

from erdma.agent.config import build_config
from erdma.agent.plugins import default_registry
from erdma.agent.service import Agent
from erdma.api.names import ERDMA_RESOURCE
from erdma.host.devices import scan
from erdma.sim import fakehost
from erdma.sim.kubelet import FakeKubelet
from tests.integration.toy_resource import TOY_RESOURCE, toy_plugin


def toy_agent(root: Path) -> Agent:
    """An agent on the default fixture host serving `aliyun/erdma` and the toy."""
    fakehost.build(root / "host", "default")
    flags = {
        "host_root": root / "host",
        "kubelet_dir": root / "kubelet",
        "local_eri_discovery": True,
        "metadata_url": "http://127.0.0.1:9",
        "metrics_port": 0,
        "rescan_interval": 0.1,
        "prepare_node": False,
    }
    config = build_config(environ={}, flags=flags)
    # `resources` is validated against the built-in names; the registry is what serves them
    config = config.model_copy(update={"resources": [ERDMA_RESOURCE, TOY_RESOURCE]})
    plugins = default_registry()
    plugins.register(TOY_RESOURCE, toy_plugin)
    return Agent(config, plugins=plugins)


async def test_a_toy_resource_registers_lists_and_allocates(short_root: Path) -> None:
    agent = toy_agent(short_root)
    names = sorted(d.name for d in scan(short_root / "host").devices)
    expected = {f"toy-{name}": "Healthy" for name in names}
    stop = asyncio.Event()
    async with FakeKubelet(short_root / "kubelet" / "device-plugins") as kubelet:
        running = asyncio.create_task(agent.run(stop))
        try:
            await kubelet.wait_for(lambda: kubelet.latest(TOY_RESOURCE) == expected, 30, "toy")
            assert kubelet.registered(ERDMA_RESOURCE)
            response = await kubelet.allocate(TOY_RESOURCE, [f"toy-{names[0]}"])
            assert dict(response.container_responses[0].envs) == {"TOY_DEVICES": names[0]}
        finally:
            stop.set()
            await asyncio.wait_for(running, 15)
