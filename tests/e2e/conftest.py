"""One kube-testserver and one real kubelet (with containerd) per session, agents per test.

Starting the node costs seconds and a node outlives its plugins anyway, so the kubelet is
session-scoped; each test starts its own `erdma agent` on its own fixture host and deletes the
pods it made, so the next test finds the node as a fresh agent rollout would.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.agent_support import all_fixture_device_numbers, shared_host_device_nodes
from tests.e2e.kubelet_support import (
    KUBELET_TOOL,
    Api,
    KubeletNode,
    Scheduler,
    node_slot,
    wait_for,
)
from tests.e2e.node_support import Node
from tests.fakes.kubeapi import KubeApiServer
from tests.kubeapi_support import api_server_or_skip


def _missing() -> str | None:
    """Why the real node cannot run here, naming the missing thing."""
    if os.geteuid() != 0:
        return "not root: the kubelet tool needs mount namespaces, overlay mounts and mknod"
    if not (KUBELET_TOOL / "start.sh").is_file():
        return f"kubelet tool not found at {KUBELET_TOOL} (set ERDMA_SHARED_DIR)"
    if not (os.environ.get("KUBELET_BIN") or (KUBELET_TOOL / "bin/kubelet.gz").is_file()):
        return f"no kubelet binary: set KUBELET_BIN or build {KUBELET_TOOL}/bin/kubelet.gz"
    for tool in ("unshare", "mount", "ip", "curl"):
        if not shutil.which(tool):
            return f"{tool} is not installed; the kubelet tool needs it"
    return None


@pytest.fixture(scope="session")
def e2e_kube_api() -> Iterator[KubeApiServer]:
    """A kube-testserver of our own (its own etcd), so Nodes and pods start empty."""
    why = _missing()
    if why:
        pytest.skip(why)
    server = api_server_or_skip()
    with server:
        yield server


@pytest.fixture(scope="session")
def api(e2e_kube_api: KubeApiServer) -> Api:
    """Plain HTTPS to the API server: what the kubelet wrote is read back as it is stored."""
    return Api(e2e_kube_api.kubeconfig)


@pytest.fixture(scope="session")
def kubelet(e2e_kube_api: KubeApiServer, api: Api) -> Iterator[KubeletNode]:
    """The real kubelet on our own state dir, node name and ports, Ready."""
    with node_slot() as (state, name), shared_host_device_nodes(all_fixture_device_numbers()):
        KubeletNode.reset(state)
        node = KubeletNode(e2e_kube_api.kubeconfig, state, name)
        try:
            node.start()
        except RuntimeError as exc:
            node.stop_all()
            pytest.skip(f"kubelet tool could not start a node here: {exc}")
        try:
            wait_for(lambda: _ready(api, node.node), f"Node {node.node} Ready")
            yield node
        finally:
            node.stop_all()


def _ready(api: Api, name: str) -> bool:
    obj = api.get(f"/api/v1/nodes/{name}") or {}
    conditions = obj.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="session")
def scheduler(e2e_kube_api: KubeApiServer, kubelet: KubeletNode) -> Iterator[Scheduler]:
    """The real kube-scheduler, only for the tests that leave binding and allocation to it."""
    state = Path(tempfile.mkdtemp(prefix="erdma-e2e-sched-", dir="/var/tmp"))
    sched = Scheduler(e2e_kube_api.kubeconfig, state)
    try:
        sched.start()
    except RuntimeError as exc:
        sched.stop()
        pytest.skip(f"kube-scheduler could not start here: {exc}")
    try:
        yield sched
    finally:
        sched.stop()
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def node(api: Api, kubelet: KubeletNode) -> Iterator[Node]:
    root = Path(tempfile.mkdtemp(prefix="erdma-e2e-", dir="/tmp"))
    rig = Node(api, kubelet, root)
    try:
        yield rig
    finally:
        rig.close()
        if not os.environ.get("ERDMA_E2E_KEEP"):  # agent logs and fixture hosts, to debug
            shutil.rmtree(root, ignore_errors=True)
