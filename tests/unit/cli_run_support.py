"""Run ``erdma agent`` / ``erdma controller`` as a user does (a subprocess, no ERDMA_* from the
test's environment) and check a refusal: one line, exit code 2, nothing started."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def run_program(
    program: str, *args: str, cwd: Path, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERDMA_")}
    env.pop("NODE_NAME", None)
    return subprocess.run(
        [*prefix, sys.executable, "-m", "erdma", program, *args],
        capture_output=True,
        text=True,
        timeout=20,
        env=env,
        cwd=cwd,
        check=False,
    )


def agent(
    tmp_path: Path, *args: str, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    base: tuple[str, ...] = ("--metrics-port", "0", "--host-root", str(tmp_path))
    base += ("--resources", "aliyun/erdma")
    if "--kubelet-dir" not in args:
        base += ("--kubelet-dir", str(tmp_path / "kubelet"))
    return run_program("agent", *base, *args, cwd=tmp_path, prefix=prefix)


def refused(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "Traceback" not in out and "agent started" not in out, out
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, out
    assert len(lines[0]) < 1000, lines[0][:2000]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
