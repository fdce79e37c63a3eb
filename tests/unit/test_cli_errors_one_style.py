"""Every `erdma` command says what went wrong the same way, one line on stderr:
`erdma <command>: error: <the flag, key or path, the value, what is accepted>`, and exits
with a code from the one table in docs/cli.md, which docs/docker-cdi.md agrees with."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from erdma.sim import fakehost
from tests import docs_support as docs

ROOT = Path(__file__).resolve().parents[2]
CLI_DOC = ROOT / "docs/cli.md"

#: (command, arguments, exit code): each a mistake a person makes, run as they run it
CASES = [
    ("devices", ["--colour"], 2),
    ("doctor", ["--proc-root", "{tmp}/nowhere"], 2),
    ("docker args", ["--root", "{host}", "--memlock", "lots"], 2),
    ("docker args", ["--root", "{host}", "--device", "mlx5_9"], 2),
    ("docker args", ["--root", "{empty}"], 1),
    ("docker run", ["--root", "{host}", "--engine", "rkt", "alinux3/alinux3"], 125),
    ("cdi generate", ["--root", "{host}", "--format", "toml"], 2),
    ("cdi generate", ["--root", "{empty}", "--output-dir", "{tmp}/cdi"], 1),
    ("smc sockets", ["--netns", "{tmp}/nowhere"], 2),
    ("smcr-init", [], 2),
    ("sim", ["--kubeconfig", "{tmp}/kubeconfig"], 2),
    ("agent", ["--slots-per-device", "0"], 2),
    ("controller", ["--config-path", "{tmp}/nowhere.json"], 2),
]


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("hosts")
    fakehost.build(tmp / "host")
    fakehost.build(tmp / "empty", "driver-not-loaded")
    return {"tmp": str(tmp), "host": str(tmp / "host"), "empty": str(tmp / "empty")}


def _erdma(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ERDMA_", "SMCR_"))}
    return subprocess.run(
        [sys.executable, "-m", "erdma", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def exit_codes(text: str) -> dict[str, str]:
    """The rows of the `## Exit codes` table of docs/cli.md: code -> meaning."""
    section = text.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\d+|\*)` \| (.*) \|$", section, re.MULTILINE)
    return dict(rows)


@pytest.mark.parametrize(
    ("command", "args", "code"), CASES, ids=[f"{c} {' '.join(a)}" for c, a, _ in CASES]
)
def test_an_error_is_one_line_naming_the_command(
    hosts: dict[str, str], command: str, args: list[str], code: int
):
    done = _erdma([*command.split(), *(a.format(**hosts) for a in args)])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"erdma {command}: error: "), lines[0]
    assert "Traceback" not in done.stderr and "Usage:" not in done.stderr
    assert done.returncode == code, done.stderr
    assert str(code) in exit_codes(CLI_DOC.read_text())


def test_the_exit_code_table_has_every_code_the_commands_use():
    table = exit_codes(CLI_DOC.read_text())
    assert {"0", "1", "2", "125", "*"} <= set(table), table
    assert "docker run" in table["125"] and "docker run" in table["*"]


def test_docker_cdi_shows_the_codes_of_the_table():
    """docs/docker-cdi.md's transcripts exit only with codes the table gives their command."""
    table = exit_codes(CLI_DOC.read_text())
    path = ROOT / "docs/docker-cdi.md"
    commands = docs.commands_in(path.read_text(), "docs/docker-cdi.md")
    shown = {c.exit_code for c in commands if c.command.startswith("erdma ")}
    assert shown - {0} and {str(code) for code in shown} <= set(table)
    for command in commands:
        if command.command.startswith("erdma docker run") and command.exit_code:
            assert command.exit_code == 125, command
        elif command.command.startswith("erdma docker args") and command.exit_code:
            assert command.exit_code in (1, 2), command
