"""`erdma sim --dra` shows the whole DRA flow on a simulated node: without an API server, and
with one, where a kubelet restart deletes the node's slice and the driver restores it."""

from __future__ import annotations

from click.testing import CliRunner

from erdma.dra.names import DRIVER_NAME
from erdma.tools.sim import sim_command
from erdma.tools.sim_dra import NODE
from tests.fakes.kubeapi import KubeApiServer

pytest_plugins = ["tests.integration.conftest_kubeapi"]
SLICE = f"{NODE}-{DRIVER_NAME}"


def test_sim_dra_registers_prepares_and_cleans_up():
    result = CliRunner().invoke(sim_command, ["--dra", "--variant", "gpu"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "registered (DRA v1" in out
    assert "resource.kubernetes.io/pcieRoot=pci0000:00" in out
    assert "NodePrepareResources: ['k8s.erdma.aliyun.com/claim=" in out
    assert "NCCL_IB_HCA==erdma_0" in out and "spec removed: True" in out


def test_sim_dra_on_an_api_server_shows_the_slice_restored_after_a_kubelet_restart(
    kube_api: KubeApiServer,
):
    result = CliRunner().invoke(
        sim_command, ["--dra", "--variant", "gpu", "--kubeconfig", str(kube_api.kubeconfig)]
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"ResourceSlice {SLICE} applied to the API server" in out
    assert f"kubelet restarts: deletes this node's ResourceSlices ['{SLICE}']" in out
    assert f"{SLICE} restored after" in out
    assert "NodePrepareResources: ['k8s.erdma.aliyun.com/claim=" in out
