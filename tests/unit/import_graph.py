"""What a fresh interpreter has imported after some code: for tests of a program's import cost."""

from __future__ import annotations

import json
import subprocess
import sys


def modules_after(code: str) -> set[str]:
    """sys.modules of a fresh interpreter after ``code`` (this process has imported more)."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout
    return set(json.loads(out.splitlines()[-1]))
