"""The pre-delete hook never fails `helm uninstall`. Helm stops an uninstall whose pre-delete hook
fails, before deleting anything, and leaves the release half removed; so the hook's
`erdma drop-finalizers` gives up at its deadline on an API server that refuses, hangs or turns
its writes away, says which ERdmaDevices keep the finalizer and the command that removes it,
and exits 0; and the Job itself ends before Helm stops waiting for it.

The command runs as the Job's container would (its rendered arguments, the `erdma` program),
against a port nobody listens on, one that accepts and never answers, and the real test API
server behind a proxy that refuses or holds the writes.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from erdma.kube import crd
from tests.fakes.kubeapi import KubeApiServer
from tests.fakes.ports import free_port
from tests.helm_support import ACCESS_KEY, render
from tests.integration import kubectl_support as kc
from tests.integration.api_fault_proxy import ApiFaultProxy, Rule, status_answer

pytest_plugins = ["tests.integration.conftest_kubeapi"]

ERDMA = Path(sys.executable).parent / "erdma"
HOOK = "alibabacloud-erdma-controller-drop-finalizers"
#: `helm uninstall --timeout` default: how long Helm waits for a hook Job
HELM_WAIT_SECONDS = 300
#: the deadline the tests give the command, instead of the Job's, to keep them short
SHORT_DEADLINE = "5"
#: the documented fallback (docs/install.md, "Uninstall"), which the hook's message repeats
CLEANUP = "kubectl get erdmadevices -o name | xargs -r kubectl patch --type=merge"
DEVICES = f"/apis/{crd.GROUP}/{crd.VERSION}/{crd.PLURAL}/"


def hook_job() -> dict[str, Any]:
    job = render(ACCESS_KEY).get("Job", HOOK)
    assert "pre-delete" in job["metadata"]["annotations"]["helm.sh/hook"]
    return job


def hook_args(deadline: str | None = SHORT_DEADLINE) -> list[str]:
    """The Job's container arguments, with ``deadline`` in place of the rendered one."""
    (container,) = hook_job()["spec"]["template"]["spec"]["containers"]
    args = [str(a) for a in container["args"]]
    if deadline is not None:
        args[args.index("--deadline") + 1] = deadline
    return args


def run_hook(kubeconfig: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """The container's command; the timeout only keeps a hang from holding the suite."""
    argv = [str(ERDMA), *args, "--kubeconfig", str(kubeconfig)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def kubeconfig_for(port: int, directory: Path) -> Path:
    cluster = {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose connections the kernel accepts (listen backlog) and nobody ever answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def assert_gave_up_cleanly(ran: subprocess.CompletedProcess[str], left: str) -> None:
    assert ran.returncode == 0, ran.stderr
    said = ran.stdout + ran.stderr
    assert left in said, said
    assert crd.FINALIZER in said and CLEANUP in said, said
    assert "uninstall goes on" in said, said


def test_job_ends_before_helm_stops_waiting_and_the_command_before_the_job() -> None:
    job, args = hook_job(), hook_args(deadline=None)
    deadline = float(args[args.index("--deadline") + 1])
    assert "--best-effort" in args
    assert deadline < job["spec"]["activeDeadlineSeconds"] < HELM_WAIT_SECONDS
    assert job["spec"]["backoffLimit"] <= 1


def test_the_job_and_its_log_outlive_the_uninstall() -> None:
    """Helm deletes a hook Job on success under `hook-succeeded`, and the log that names what
    was left goes with it; the Job stays, and Kubernetes removes it later."""
    job = hook_job()
    policy = job["metadata"]["annotations"]["helm.sh/hook-delete-policy"].split(",")
    assert "hook-succeeded" not in policy and "before-hook-creation" in policy
    assert job["spec"]["ttlSecondsAfterFinished"] > 0


def test_a_refusing_api_server_leaves_every_erdmadevice_and_exits_zero(tmp_path: Path) -> None:
    nobody = kubeconfig_for(free_port(), tmp_path)
    ran = run_hook(nobody, hook_args(deadline=None))
    assert_gave_up_cleanly(ran, "every ERdmaDevice")


def test_a_hanging_api_server_is_given_up_at_the_deadline(silent_port: int, tmp_path: Path) -> None:
    ran = run_hook(kubeconfig_for(silent_port, tmp_path), hook_args())
    assert_gave_up_cleanly(ran, f"gave up after {SHORT_DEADLINE}s")
    assert "every ERdmaDevice" in ran.stderr


async def hold(_: web.Request) -> web.StreamResponse:
    """A write the API server takes and never answers."""
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    "answer", [status_answer(403, "Forbidden"), hold], ids=["forbidden", "held"]
)
async def test_writes_turned_away_name_the_erdmadevices_left(
    kube_api: KubeApiServer, answer: Any, request: pytest.FixtureRequest
) -> None:
    names = [f"hook-{request.node.callspec.id}-{i}" for i in range(2)]
    kc.apply(kube_api.kubeconfig, [crd.build(n, f"uid-{n}", "i-hook", [], False) for n in names])
    try:
        async with ApiFaultProxy(kube_api) as proxy:
            proxy.add(Rule(lambda r: r.method == "PATCH" and r.path.startswith(DEVICES), answer))
            ran = await asyncio.to_thread(run_hook, proxy.kubeconfig(), hook_args())
        assert_gave_up_cleanly(ran, f"{names[0]}, {names[1]}")
    finally:
        release = ["--type=merge", "-p", '{"metadata":{"finalizers":null}}']
        for name in names:
            kc.kubectl(kube_api.kubeconfig, "patch", f"{crd.PLURAL}/{name}", *release)
            kc.kubectl(kube_api.kubeconfig, "delete", f"{crd.PLURAL}/{name}", "--wait=false")
