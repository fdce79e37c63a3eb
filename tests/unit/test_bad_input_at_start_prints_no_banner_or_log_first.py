"""More bad start-up input through the real CLI, each once found printing several lines, a
usage banner or a log line before its error: still one line naming the key, flag or file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.unit.cli_run_support import agent, refused


def test_dra_without_a_node_name_says_so_before_anything_is_logged(tmp_path: Path):
    file = tmp_path / "agent.yaml"
    file.write_text("dra: {enabled: true}\n")
    refused(agent(tmp_path, "--config", str(file)), "dra.enabled", "node name")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("a: [b\n", "line 2, column 1"),
        ("a: !!python/object/apply:os.system ['true']\n", "line 1, column 4"),
    ],
)
def test_a_yaml_error_is_one_line_with_its_position(tmp_path: Path, text: str, where: str):
    file = tmp_path / "agent.yaml"
    file.write_text(text)
    refused(agent(tmp_path, "--config", str(file)), str(file), "not valid yaml", where)


@pytest.mark.parametrize(
    ("flag", "value"), [("--slots-per-device", "abc"), ("--rescan-interval", "soon")]
)
def test_a_flag_of_the_wrong_type_is_one_line(tmp_path: Path, flag: str, value: str):
    refused(agent(tmp_path, flag, value), flag, repr(value))


def test_an_unknown_flag_is_one_line(tmp_path: Path):
    refused(agent(tmp_path, "--slots-per-devices", "3"), "--slots-per-devices")


@pytest.mark.skipif(
    os.geteuid() == 0 and not shutil.which("setpriv"), reason="root reads a mode-000 file"
)
def test_an_unreadable_config_file_is_named(tmp_path: Path):
    file = tmp_path / "agent.yaml"
    file.write_text("slotsPerDevice: 3\n")
    file.chmod(0)
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    result = agent(tmp_path, "--config", str(file), prefix=prefix if os.geteuid() == 0 else [])
    refused(result, str(file), "Permission denied")
