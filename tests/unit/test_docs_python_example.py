"""The ECS emulator example in docs/cloud.md runs as printed, from the repository root."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_emulator_example_runs_as_printed(tmp_path: Path) -> None:
    text = (REPO / "docs" / "cloud.md").read_text()
    section = text.split("## Trying it without a cloud account", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, "docs/cloud.md lost its emulator example"
    script = tmp_path / "example.py"
    script.write_text(block.group(1))
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    ids, calls = result.stdout.strip().split("] ", 1)
    assert ids.count("eni-") == 2  # both cards of the GPU type
    assert "CreateNetworkInterface" in calls
