"""A host root that does not exist is a mistyped path, not a host without eRDMA: every command
that reads one refuses it, naming the path, instead of reporting "the erdma kernel module is
not loaded" (and exiting 0) about a directory that is not there."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from erdma.cli import main
from erdma.tools.docker import ENGINE_ERROR
from tests.unit.cli_run_support import agent, refused

#: (command, its options besides --root, exit code)
COMMANDS = [
    ("devices", [], 2),
    ("doctor", [], 2),
    ("docker args", [], 2),
    ("docker run", ["--dry-run", "alinux3/alinux3"], ENGINE_ERROR),  # as `docker run` fails
    ("cdi generate", ["--output-dir", "{tmp}/cdi"], 2),
]


@pytest.mark.parametrize(("command", "options", "code"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_root_that_does_not_exist_is_refused_by_name(
    tmp_path: Path, command: str, options: list[str], code: int
):
    missing = tmp_path / "hsot"
    args = [*command.split(), "--root", str(missing), *(o.format(tmp=tmp_path) for o in options)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == code, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"erdma {command}: error: "), line
    assert str(missing) in line and "does not exist" in line
    assert "kernel module" not in result.output
    assert not (tmp_path / "cdi").exists()


def test_doctor_refuses_a_proc_root_that_does_not_exist(tmp_path: Path):
    missing = tmp_path / "host-proc"
    args = ["doctor", "--root", str(tmp_path), "--proc-root", str(missing)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("erdma doctor: error: ") and str(missing) in line


def test_the_agent_refuses_a_host_root_that_does_not_exist(tmp_path: Path):
    missing = tmp_path / "host"
    line = refused(agent(tmp_path, "--host-root", str(missing)), "erdma agent: error: ")
    assert f"hostRoot (--host-root)='{missing}': no such directory" in line
