"""The Makefile is the front door of a fresh clone: `make help` lists every target, and the
first `make demo` says it is setting up the virtualenv (a minute or two of pip) instead of
sitting silent. A stand-in for python3 plays `-m venv` and `-m pip`, so no package is fetched.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE_PYTHON = """#!/bin/sh
# python3 -m venv DIR makes DIR/bin/python (this script); DIR/bin/python -m pip ... does nothing
if [ "$1" = -m ] && [ "$2" = venv ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; fi
"""

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_help_lists_every_target_with_what_it_does():
    phony = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert phony is not None
    done = _make("help")
    assert done.returncode == 0, done.stderr
    listed = dict(re.findall(r"^\s*(\S+)\s+(\S.*)$", done.stdout, re.MULTILINE))
    for target in phony.group(1).split():
        assert listed.get(target), f"`make help` does not explain {target}:\n{done.stdout}"


def test_the_first_run_says_it_sets_up_the_virtualenv_and_later_runs_do_not(tmp_path: Path):
    python = tmp_path / "python3"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    venv = tmp_path / "venv"
    first = _make("venv", f"PYTHON={python}", f"VENV={venv}")
    assert first.returncode == 0, first.stderr
    said = first.stdout.splitlines()
    assert said[0] == f"Setting up {venv} (1-2 minutes; reused until pyproject.toml changes):"
    assert f"  creating the virtualenv {venv}" in said
    assert "  installing erdma-k8s and its test tools with pip" in said
    again = _make("venv", f"PYTHON={python}", f"VENV={venv}")
    assert again.returncode == 0 and "Setting up" not in again.stdout
