"""The agent's /healthz and /readyz on its metrics port, as kubelet's probes see them."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

from erdma.agent import probes
from erdma.agent.config import build_config
from erdma.agent.service import Agent
from erdma.aio import Heartbeat
from erdma.host.run import RecordingRunner
from erdma.sim import fakehost
from erdma.sim.fakecmds import KmodCommands
from erdma.sim.kubelet import FakeKubelet
from erdma.sim.node import SimulatedNode
from tests.fakes.ports import free_port


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


async def until(port: int, path: str, status: int, timeout: float = 15) -> str:
    for _ in range(int(timeout * 10)):
        code, body = await asyncio.to_thread(get, port, path)
        if code == status:
            return body
        await asyncio.sleep(0.1)
    raise AssertionError(f"{path} never answered {status}; last {code}: {body}")


async def test_ready_only_once_every_resource_is_registered(short_root: Path) -> None:
    port = free_port()
    node = SimulatedNode(short_root, "default", ["--metrics-port", str(port)])
    try:
        await node.start(kubelet=False)  # no kubelet yet: the plugin cannot register
        await until(port, "/healthz", 200)
        body = json.loads(await until(port, "/readyz", 503))
        assert body["reasons"] == ["aliyun/erdma not registered with kubelet yet"]
        await node.kubelet.start()
        await node.wait_registered("aliyun/erdma")
        assert json.loads(await until(port, "/readyz", 200)) == {"status": "ok"}
        code, metrics = await asyncio.to_thread(get, port, "/metrics")
        assert code == 200 and "erdma_agent_scan_duration_seconds" in metrics
    finally:
        await node.stop()


def test_a_silent_loop_fails_liveness(monkeypatch) -> None:
    heartbeat = Heartbeat()
    checks = probes.Probes(heartbeat, [])
    assert checks.healthz()[0] == 200
    monkeypatch.setattr(heartbeat, "age", lambda: probes.WEDGED_AFTER + 1)
    status, body = checks.healthz()
    assert status == 503 and "event loop silent for 31s" in body["reason"]


def test_readiness_lists_every_missing_piece() -> None:
    checks = probes.Probes(Heartbeat(), [lambda: "driver missing", lambda: None, lambda: "x"])
    assert checks.readyz() == (503, {"status": "not ready", "reasons": ["driver missing", "x"]})


async def test_not_ready_while_the_driver_is_missing_then_ready_once_installed(
    short_root: Path,
) -> None:
    """A node whose erdma module cannot be loaded holds a DaemonSet rollout at its first wave."""
    host = fakehost.build(short_root / "host", "driver-not-loaded")
    kmod = KmodCommands(host, installed={"smc"})
    kubelet = FakeKubelet(short_root / "kubelet" / "device-plugins")
    port = free_port()
    flags = {
        "host_root": short_root / "host",
        "kubelet_dir": short_root / "kubelet",
        "local_eri_discovery": True,
        "metrics_port": port,
        "rescan_interval": 0.1,
        "prepare_node": True,
    }
    agent = Agent(build_config(environ={}, flags=flags), runner=RecordingRunner(handlers=[kmod]))
    stop = asyncio.Event()
    async with kubelet:
        running = asyncio.create_task(agent.run(stop))
        try:
            body = json.loads(await until(port, "/readyz", 503))
            assert "erdma not loaded in driver mode default yet (see its Events)" in body["reasons"]
            kmod.installed.add("erdma")  # the driver package arrives; the next attempt loads it
            await until(port, "/readyz", 200, timeout=30)
        finally:
            stop.set()
            await asyncio.wait_for(running, 15)
