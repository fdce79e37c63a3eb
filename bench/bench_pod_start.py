"""Pod start with the real kubelet: created -> Running, with `aliyun/erdma: 1` and without.

Run (as root, with `../shared/tools/kubelet` and kube-testserver available, as `make e2e`):
`.venv/bin/python -m bench.bench_pod_start --pods 20`. It starts what the e2e tests start
(`tests/e2e`): kube-testserver, the real kubelet with containerd, and the `erdma agent` as the
Helm chart configures it on a fixture host, then creates hostNetwork busybox pods bound to the
node, alternating one asking for `aliyun/erdma: 1` and the same pod without it, one at a time:
each is timed from its create call returning until the API server shows it `Running` (polled
every 20 ms), then deleted and waited for until gone. The difference of the medians is what the
device plugin (kubelet's Allocate call, the device specs, the agent's answer) adds to a start.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.proc import loadavg
from bench.stats import pct
from tests.e2e.agent_support import all_fixture_device_numbers, shared_host_device_nodes
from tests.e2e.kubelet_support import Api, KubeletNode, node_slot
from tests.e2e.node_support import Node
from tests.e2e.pods_support import PODS, phase, pod_manifest, unique
from tests.fakes.kubeapi import KubeApiServer

ERDMA = "aliyun/erdma"
POLL = 0.02
#: what one pod may take before the benchmark gives up on it
POD_TIMEOUT = 120.0


def wait_until(check: Callable[[], bool], what: str) -> None:
    """Poll ``check`` every `POLL` seconds (finer than the e2e helper's 0.1 s)."""
    deadline = time.monotonic() + POD_TIMEOUT
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {POD_TIMEOUT:.0f}s waiting for {what}")
        time.sleep(POLL)


def start_one(api: Api, node: str, limits: dict[str, str]) -> float:
    """Seconds from the pod's create call returning to the API server showing it Running;
    the pod is deleted and gone before this returns."""
    name = unique("start")
    api.create(PODS, pod_manifest(name, node, limits))
    began = time.monotonic()
    wait_until(lambda: phase(api, name) == "Running", f"pod {name} Running")
    took = time.monotonic() - began
    api.delete(f"{PODS}/{name}")
    wait_until(lambda: api.get(f"{PODS}/{name}") is None, f"pod {name} gone")
    return took


def measure(pods: int) -> dict[str, list[float]]:
    """``pods`` starts with the device and ``pods`` without, interleaved."""
    times: dict[str, list[float]] = {"with aliyun/erdma: 1": [], "without": []}
    with KubeApiServer.start() as server:
        api = Api(server.kubeconfig)
        with node_slot() as (state, name), shared_host_device_nodes(all_fixture_device_numbers()):
            KubeletNode.reset(state)
            kubelet = KubeletNode(server.kubeconfig, state, name)
            root = Path(tempfile.mkdtemp(prefix="bench-pod-start-", dir="/tmp"))
            try:
                kubelet.start()
                rig = Node(api, kubelet, root)
                agent = rig.agent("default")
                rig.wait_allocatable(ERDMA, 2 * int(agent.config["slotsPerDevice"]))
                start_one(api, name, {})  # the image and the pod sandbox path warm
                for _ in range(pods):
                    times["with aliyun/erdma: 1"].append(start_one(api, name, {ERDMA: "1"}))
                    times["without"].append(start_one(api, name, {}))
                rig.close()
            finally:
                kubelet.stop_all()
                shutil.rmtree(root, ignore_errors=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=20, help="pods of each kind")
    args = parser.parse_args()
    before = loadavg()
    times = measure(args.pods)
    print(f"load average: {before} at start, {loadavg()} at end; {args.pods} pods of each kind")
    print("| pod | created -> Running: median | p90 | max |\n| --- | --- | --- | --- |")
    for kind, took in times.items():
        print(
            f"| {kind} | {statistics.median(took):.2f} s | {pct(took, 0.9):.2f} s "
            f"| {max(took):.2f} s |"
        )
    added = statistics.median(times["with aliyun/erdma: 1"]) - statistics.median(times["without"])
    print(f"| device plugin adds (median) | **{added:+.2f} s** | | |")


if __name__ == "__main__":
    main()
