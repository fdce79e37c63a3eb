"""Uninstall removes the DRA driver's ResourceSlices: the agents keep theirs when they stop (a
rolling update must not leave a node without one), so with `dra.enabled` the chart's pre-delete
hook deletes every slice of the driver, on every node, and nothing else. It runs as the Job's
container would (its rendered arguments, the `erdma` program) against the real test API server;
a refused deletion does not fail the uninstall and names the slices left and the command that
removes them."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from erdma.dra.names import DRIVER_NAME
from tests.fakes.kubeapi import KubeApiServer
from tests.helm_support import ACCESS_KEY, merge, render
from tests.integration import kubectl_support as kc
from tests.integration.api_fault_proxy import ApiFaultProxy, Rule, status_answer

pytest_plugins = ["tests.integration.conftest_kubeapi"]

ERDMA = Path(sys.executable).parent / "erdma"
HOOK = "alibabacloud-erdma-controller-drop-finalizers"
CONTROLLER = "alibabacloud-erdma-controller"
SLICES = "/apis/resource.k8s.io/v1/resourceslices/"
DRA = merge(ACCESS_KEY, {"dra": {"enabled": True}})


def hook_args(values: dict[str, Any]) -> list[str]:
    (container,) = render(values).get("Job", HOOK)["spec"]["template"]["spec"]["containers"]
    args = [str(a) for a in container["args"]]
    args[args.index("--deadline") + 1] = "20"  # the Job's 120 s, shortened for the refusal
    return args


def run_hook(kubeconfig: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """The container's command; the timeout only keeps a hang from holding the suite."""
    argv = [str(ERDMA), *args, "--kubeconfig", str(kubeconfig)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def a_slice(name: str, driver: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }


def names_of(kube_api: KubeApiServer, driver: str) -> set[str]:
    got = kc.kubectl(
        kube_api.kubeconfig,
        "get",
        "resourceslices",
        "-o",
        "yaml",
        f"--field-selector=spec.driver={driver}",
    )
    assert got.returncode == 0, got.stderr
    return {s["metadata"]["name"] for s in yaml.safe_load(got.stdout)["items"]}


@pytest.fixture
def slices(kube_api: KubeApiServer) -> dict[str, list[str]]:
    """Our driver's slices on two nodes (one whose kubelet is down), and a GPU driver's."""
    tag = uuid.uuid4().hex[:6]
    made = {
        DRIVER_NAME: [f"up-{tag}-{DRIVER_NAME}", f"down-{tag}-{DRIVER_NAME}"],
        "gpu.example.com": [f"up-{tag}-gpu"],
    }
    kc.apply(
        kube_api.kubeconfig,
        [a_slice(n, driver, n.split("-")[0] + tag) for driver, ns in made.items() for n in ns],
    )
    return made


def test_only_the_dra_chart_deletes_slices_on_uninstall() -> None:
    """Without DRA the hook and the controller's ClusterRole know nothing of slices."""
    plain = render(ACCESS_KEY)
    assert "--delete-slices-of" not in hook_args(ACCESS_KEY)
    rules = plain.get("ClusterRole", CONTROLLER)["rules"]
    assert not [r for r in rules if "resourceslices" in r["resources"]]
    args = hook_args(DRA)
    assert args[args.index("--delete-slices-of") + 1] == DRIVER_NAME
    (grant,) = [
        r
        for r in render(DRA).get("ClusterRole", CONTROLLER)["rules"]
        if "resourceslices" in r["resources"]
    ]
    assert sorted(grant["verbs"]) == ["delete", "list"]


def test_the_hook_deletes_every_slice_of_the_driver_and_no_other(
    kube_api: KubeApiServer, slices: dict[str, list[str]]
) -> None:
    kc.kubectl_or_skip()
    ran = run_hook(kube_api.kubeconfig, hook_args(DRA))
    assert ran.returncode == 0, ran.stderr
    assert f"ResourceSlice(s) of {DRIVER_NAME} deleted" in ran.stdout
    assert not names_of(kube_api, DRIVER_NAME) & set(slices[DRIVER_NAME])
    assert set(slices["gpu.example.com"]) <= names_of(kube_api, "gpu.example.com")
    kc.kubectl(kube_api.kubeconfig, "delete", "resourceslices", *slices["gpu.example.com"])


async def test_refused_deletions_name_the_slices_left_and_the_uninstall_goes_on(
    kube_api: KubeApiServer, slices: dict[str, list[str]]
) -> None:
    kc.kubectl_or_skip()
    forbidden = status_answer(403, "Forbidden")

    def deletes_ours(request: web.Request) -> bool:
        return request.method == "DELETE" and request.path.startswith(SLICES)

    async with ApiFaultProxy(kube_api) as proxy:
        proxy.add(Rule(deletes_ours, forbidden))
        ran = await asyncio.to_thread(run_hook, proxy.kubeconfig(), hook_args(DRA))
    said = ran.stdout + ran.stderr
    assert ran.returncode == 0, said
    assert "cannot delete ResourceSlices: 403" in said and "uninstall goes on" in said, said
    assert all(name in said for name in slices[DRIVER_NAME]), said
    assert f"kubectl delete resourceslices --field-selector spec.driver={DRIVER_NAME}" in said
    assert "not removed" not in said, said  # the finalizers went fine
    everything = [n for ns in slices.values() for n in ns]
    kc.kubectl(kube_api.kubeconfig, "delete", "resourceslices", *everything)
