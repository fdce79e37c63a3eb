"""Restarts on a real node: the kubelet (SIGTERM, start again on the same state) and the agent
(SIGKILL, start again). The agent re-registers with the new kubelet.sock, running pods keep
their containers and devices (the kubelet's checkpoint), a new pod is admitted, and no slot is
ever given to two pods."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.agent_support import Agent
from tests.e2e.kubelet_support import record, wait_for
from tests.e2e.node_support import Node
from tests.e2e.pods_support import PODS, pod_manifest, unique

pytestmark = pytest.mark.root
ERDMA = "aliyun/erdma"


def _registrations(agent: Agent) -> list[float]:
    """Wall-clock times of the agent's "registered with kubelet" log lines."""
    return agent.log_times("registered with kubelet")


def _held(node: Node) -> dict[str, list[str]]:
    """Pod UID -> device IDs of aliyun/erdma, from the kubelet's device checkpoint."""
    held: dict[str, list[str]] = {}
    for entry in node.kubelet.checkpoint()["Data"]["PodDeviceEntries"]:
        if entry["ResourceName"] == ERDMA:
            ids = [i for per_numa in entry["DeviceIDs"].values() for i in per_numa]
            held.setdefault(entry["PodUID"], []).extend(ids)
    return held


def _container(node: Node, name: str) -> tuple[str, int]:
    """(container ID, restart count) once the API shows the container running: the pod's log
    says READY before the kubelet's next status update says so."""

    def running() -> tuple[str, int] | None:
        pod = node.api.get(f"{PODS}/{name}") or {}
        for status in pod.get("status", {}).get("containerStatuses", []):
            if "running" in status.get("state", {}):
                return status["containerID"], int(status["restartCount"])
        return None

    return wait_for(running, f"pod {name}'s container running in the API")


def _identity(path: Path) -> tuple[int, int]:
    """(inode, ctime): a new socket may reuse the deleted one's inode number, not its ctime."""
    stat = path.stat()
    return stat.st_ino, stat.st_ctime_ns


def _assert_no_slot_twice(held: dict[str, list[str]]) -> None:
    every = [i for ids in held.values() for i in ids]
    assert len(every) == len(set(every)), held


def _new_pod(node: Node, slots: str = "1") -> dict[str, Any]:
    pod, _ = node.run(pod_manifest(unique("restart"), node.kubelet.node, {ERDMA: slots}))
    return pod


@dataclass
class Before:
    """A node with a running pod holding 2 slots, as it was before the restart."""

    agent: Agent
    slots: int
    pod: str
    uid: str
    container: tuple[str, int]
    held: list[str]
    registrations: int


def _before_restart(node: Node) -> Before:
    agent = node.agent("default")
    slots = int(agent.config["slotsPerDevice"])
    node.wait_allocatable(ERDMA, 2 * slots)
    pod = _new_pod(node, "2")
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    registered = len(wait_for(lambda: _registrations(agent), "first registration"))
    return Before(agent, slots, name, uid, _container(node, name), _held(node)[uid], registered)


def _assert_kept(node: Node, before: Before, *new_pods: dict[str, Any]) -> None:
    """The old pod kept its container and devices; the new pods were admitted; no slot twice."""
    node.wait_allocatable(ERDMA, 2 * before.slots)
    assert _container(node, before.pod) == before.container  # same container, not restarted
    held = _held(node)
    assert held[before.uid] == before.held  # from the checkpoint
    assert set(held) >= {before.uid, *(pod["metadata"]["uid"] for pod in new_pods)}
    _assert_no_slot_twice(held)


def test_kubelet_restart_keeps_pods_and_the_agent_re_registers(node: Node) -> None:
    before = _before_restart(node)
    old_sock = _identity(node.kubelet.kubelet_sock)

    node.kubelet.stop_kubelet()
    node.kubelet.start()
    sock: Path = node.kubelet.kubelet_sock
    wait_for(lambda: sock.exists() and _identity(sock) != old_sock, "a new kubelet.sock")
    created = sock.stat().st_mtime
    again = wait_for(
        lambda: _registrations(before.agent)[before.registrations :], "re-registration"
    )
    record(f"agent re-registered {again[0] - created:.3f}s after the new kubelet.sock")
    node.wait_allocatable(ERDMA, 2 * before.slots)
    _assert_kept(node, before, _new_pod(node))


def test_agent_sigkill_and_restart_keeps_pods_and_admits_new_ones(node: Node) -> None:
    before = _before_restart(node)

    before.agent.kill()
    before.agent.start()  # same fixture host, same config: the DaemonSet's pod restarted
    wait_for(
        lambda: _registrations(before.agent)[before.registrations :],
        "registration of the new agent",
    )
    node.wait_allocatable(ERDMA, 2 * before.slots)
    _assert_kept(node, before, _new_pod(node), _new_pod(node, "2"))
