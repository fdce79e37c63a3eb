"""`erdma driver prepare` (the driver pod's init container) installs and loads the driver once,
says so on the Node and exits; `erdma driver watch` (its capability-free container) fails with
the remedy once erdma is unloaded or reloaded in another mode, and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Node

from erdma.agent.config import AgentConfig, build_config
from erdma.agent.driver_unit import prepare_once
from erdma.sim import fakehost
from erdma.sim.fakecmds import KmodCommands
from tests.fakes.installer_node import InstallerNode, installer_tarball, mirror, sha256
from tests.fakes.kubeapi import KubeApiServer
from tests.waiting import until

pytest_plugins = ["tests.integration.conftest_kubeapi"]

ERDMA = [sys.executable, "-m", "erdma"]


@pytest.fixture
async def k8s(kube_api: KubeApiServer) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    yield client
    await client.close()


async def events_of(client: AsyncClient, node: str) -> dict[str, tuple[str, str, str]]:
    """reason -> (type, message, reporting component) of the Node's Events."""
    found = client.list(Event, namespace="default", fields={"involvedObject.name": node})
    return {
        e.reason or "": (e.type or "", e.message or "", (e.source and e.source.component) or "")
        async for e in found
    }


@dataclass
class Installing:
    """A Node on the API server, and a fixture node without erdma whose installer the local
    mirror serves."""

    node: str
    runner: InstallerNode
    host_root: Path
    files: Path
    tarball: bytes

    def config(self, kubeconfig: Path, url: str, **installer: str) -> AgentConfig:
        return build_config(
            environ={},
            flags={
                "host_root": self.host_root,
                "node_name": self.node,
                "kubeconfig": str(kubeconfig),
                "driver_installer": {"enabled": True, "mirror": url, **installer},
                "prefer_driver": "compat",
            },
        )


@pytest.fixture
async def installing(k8s: AsyncClient, short_root: Path) -> AsyncIterator[Installing]:
    node = f"node-{uuid.uuid4().hex[:8]}"
    await k8s.create(Node(metadata=ObjectMeta(name=node)))
    host = fakehost.build(short_root / "host", "driver-not-loaded")
    marker, files = short_root / "installed", short_root / "mirror" / "erdma"
    files.mkdir(parents=True)
    tarball = installer_tarball(short_root / "record", marker)
    (files / "erdma_installer-1.5.9.tar.gz").write_bytes(tarball)
    runner = InstallerNode(
        kmod=KmodCommands(host, installed={"smc"}), marker=marker, workdir=short_root / "work"
    )
    yield Installing(node, runner, host.root, files, tarball)
    await k8s.delete(Node, node)


async def test_prepare_installs_says_so_on_the_node_and_records_the_mode(
    kube_api, k8s, installing, short_root
):
    state = short_root / "state" / "prepared.json"
    with mirror(installing.files.parent) as url:
        config = installing.config(kube_api.kubeconfig, url)
        result = await prepare_once(config, state, installing.runner)
    assert result.ready
    # posted before prepare returned: the init container's exit loses none of them
    events = await events_of(k8s, installing.node)
    assert events["ErdmaDriverInstalled"][0] == "Normal"
    kind, message, component = events["ErdmaInstallerUnpinned"]
    assert kind == "Warning" and component == "erdma-driver"
    assert f"set driverInstaller.installerSha256={sha256(installing.tarball)}" in message
    assert "(Helm: agent.driverInstaller.installerSha256)" in message and "sha256sum" in message
    ready = ("Normal", "erdma loaded in mode compat (preferDriver=compat)")
    assert events["ErdmaDriverReady"][:2] == ready
    assert json.loads(state.read_text()) == {"mode": "compat", "compatMode": True}


async def test_a_pinned_install_raises_no_unpinned_warning(kube_api, k8s, installing, short_root):
    with mirror(installing.files.parent) as url:
        pin = sha256(installing.tarball)
        config = installing.config(kube_api.kubeconfig, url, installerSha256=pin)
        await prepare_once(config, short_root / "prepared.json", installing.runner)
    events = await events_of(k8s, installing.node)
    assert "ErdmaDriverReady" in events and "ErdmaInstallerUnpinned" not in events


def start_watch(state: Path, root: Path) -> subprocess.Popen[str]:
    argv = [
        *ERDMA,
        "driver",
        "watch",
        "--state-file",
        str(state),
        "--host-root",
        str(root),
        "--interval",
        "0.1",
    ]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def prepared_host(tmp_path: Path, mode: str, compat: bool) -> tuple[fakehost.FakeHost, Path]:
    host = fakehost.build(tmp_path / "host", "default")
    host.unload_module("erdma")
    host.load_module("erdma", {"compat_mode": "Y" if compat else "N"})
    state = tmp_path / "prepared.json"
    state.write_text(json.dumps({"mode": mode, "compatMode": compat}))
    return host, state


async def test_watch_fails_with_the_remedy_when_erdma_is_unloaded(tmp_path):
    host, state = prepared_host(tmp_path, "default", False)
    watch = start_watch(state, host.root)
    try:
        await until(lambda: (host.root / "sys").is_dir(), what="the fixture host")
        host.unload_module("erdma")
        await until(lambda: watch.poll() is not None, what="watch to notice the unload")
        _, err = watch.communicate()
    finally:
        watch.kill()
    assert watch.returncode == 1
    assert (
        "erdma driver watch: error: erdma is no longer loaded (it was prepared in mode "
        "default); delete this pod so its init container prepares the node again" in err
    )


async def test_watch_fails_when_erdma_is_reloaded_in_another_mode(tmp_path):
    host, state = prepared_host(tmp_path, "compat", True)
    watch = start_watch(state, host.root)
    try:
        host.unload_module("erdma")
        host.load_module("erdma", {"compat_mode": "N"})
        await until(lambda: watch.poll() is not None, what="watch to notice the reload")
        _, err = watch.communicate()
    finally:
        watch.kill()
    assert watch.returncode == 1
    assert "reloaded with compat_mode N; mode compat loads it with compat_mode=Y" in err


async def test_watch_stops_cleanly_on_sigterm(tmp_path):
    host, state = prepared_host(tmp_path, "default", False)
    watch = start_watch(state, host.root)
    try:
        await until(lambda: _handles_sigterm(watch), what="watch to start")
        watch.send_signal(signal.SIGTERM)
        watch.wait(timeout=60)
    finally:
        watch.kill()
    assert watch.returncode == 0


def _handles_sigterm(proc: subprocess.Popen[str]) -> bool:
    """Whether the process has its signal handlers (it has started its loop)."""
    status = Path(f"/proc/{proc.pid}/status")
    if not status.exists():
        return True
    caught = next(line for line in status.read_text().splitlines() if line.startswith("SigCgt"))
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


def test_watch_without_the_prepared_file_says_prepare_has_not_finished(tmp_path):
    done = subprocess.run(
        [*ERDMA, "driver", "watch", "--state-file", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "has not finished on this node" in done.stderr and str(tmp_path / "none") in done.stderr


def test_prepare_with_a_bad_setting_names_it_and_exits_2(tmp_path):
    config = tmp_path / "agent.json"
    config.write_text(json.dumps({"preferDriver": 3}))
    done = subprocess.run(
        [*ERDMA, "driver", "prepare", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NODE_NAME": ""},
    )
    assert done.returncode == 2
    assert done.stderr.startswith("erdma driver prepare: error: ") and "preferDriver" in done.stderr
