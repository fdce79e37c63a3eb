"""`erdma sim --dra` shows the whole DRA flow on a simulated node (no API server needed)."""

from __future__ import annotations

from click.testing import CliRunner

from erdma.tools.sim import sim_command


def test_sim_dra_registers_prepares_and_cleans_up():
    result = CliRunner().invoke(sim_command, ["--dra", "--variant", "gpu"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "registered (DRA v1" in out
    assert "resource.kubernetes.io/pcieRoot=pci0000:00" in out
    assert "NodePrepareResources: ['k8s.erdma.aliyun.com/claim=" in out
    assert "NCCL_IB_HCA==erdma_0" in out and "spec removed: True" in out
