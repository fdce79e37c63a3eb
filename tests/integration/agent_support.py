"""An agent on a simulated host in-process, with the kubelet stand-in and the test API server:
what the agent-supervision and start-up logging tests start and then poke at."""

from __future__ import annotations

import uuid
from pathlib import Path

from erdma.agent.config import build_config
from erdma.agent.service import Agent
from erdma.host.run import RecordingRunner
from erdma.sim import fakehost
from erdma.sim.fakecmds import KmodCommands
from erdma.sim.kubelet import FakeKubelet
from tests.fakes.kubeapi import KubeApiServer

ERDMA = "aliyun/erdma"


def agent_settings(kube_api: KubeApiServer, root: Path, **settings: object) -> dict[str, object]:
    """An in-process agent's settings: the fixture host and kubelet dir under ``root``, the
    test API server, Local mode, a fast rescan, no metrics port; ``settings`` add or override."""
    return {
        "host_root": root / "host",
        "kubelet_dir": root / "kubelet",
        "node_name": f"node-{uuid.uuid4().hex[:8]}",
        "kubeconfig": str(kube_api.kubeconfig),
        "local_eri_discovery": True,
        "metrics_port": 0,
        "rescan_interval": 0.1,
        **settings,
    }


async def start_agent(
    kube_api: KubeApiServer, root: Path, **settings: object
) -> tuple[Agent, FakeKubelet]:
    host = fakehost.build(root / "host", "default")
    kmod = KmodCommands(host, installed={"smc", "erdma"})
    kubelet = FakeKubelet(root / "kubelet" / "device-plugins")
    await kubelet.start()
    flags = agent_settings(kube_api, root, **{"prepare_node": False, **settings})
    agent = Agent(build_config(environ={}, flags=flags), runner=RecordingRunner(handlers=[kmod]))
    return agent, kubelet
