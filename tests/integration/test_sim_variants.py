"""`erdma sim --variant X` runs to the end for every fixture host, as an evaluator tries them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from erdma.sim import fakehost

#: variants where no pod can get a device: what the narration must say instead of allocating
NOTHING_TO_ALLOCATE = {
    "driver-not-loaded": "no device is listed Healthy (the agent found no device)",
    "port-down": "no device is listed Healthy (all 400 IDs are Unhealthy)",
}


@pytest.mark.parametrize("variant", sorted(fakehost.VARIANTS))
def test_every_variant_runs_cleanly(variant: str) -> None:
    argv = [sys.executable, "-m", "erdma", "sim", "--variant", variant]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert "registered" in result.stdout
    if variant in NOTHING_TO_ALLOCATE:
        assert NOTHING_TO_ALLOCATE[variant] in result.stdout
        assert "erdma doctor" in result.stdout
        assert "sample pod" not in result.stdout
        assert "capacity aliyun/erdma: 0k" not in result.stdout
    else:
        assert "sample pod asks for" in result.stdout
