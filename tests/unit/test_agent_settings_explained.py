"""What a person configuring the agent reads: `erdma agent --help` gives each flag's default,
and a misspelt key in the config file is answered with the key that was meant."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from erdma.agent.config import ConfigError, build_config
from erdma.cli import main


def _help_of(flag: str) -> str:
    """The help of one option of `erdma agent --help`: its line and those continuing it."""
    result = CliRunner().invoke(main, ["agent", "--help"], terminal_width=1000)
    assert result.exit_code == 0, result.output
    text = result.output.split(f"\n  {flag} ", 1)[1]
    return " ".join(re.split(r"\n  -", text, maxsplit=1)[0].split())


@pytest.mark.parametrize(
    ("flag", "default"),
    [
        ("--slots-per-device", "default: 200"),
        ("--rescan-interval", "default: 0.5"),
        ("--kubelet-dir", "default: /var/lib/kubelet"),
        ("--device-list-strategy", "default: device-specs"),
        ("--prepare-node", "default: true"),
        ("--kubeconfig", "default: in-cluster"),
    ],
)
def test_help_shows_each_default(flag: str, default: str):
    assert default in _help_of(flag)


@pytest.mark.parametrize(
    ("text", "where", "meant"),
    [
        ("nccl:\n  socketIfName: eth0\n", "nccl.socketIfName='eth0'", "socketIfname"),
        ("slotPerDevice: 3\n", "slotPerDevice=3", "slotsPerDevice"),
        (
            "sharedResources:\n- selectors: {driver: [mlx5_core]}\n",
            "sharedResources.0.selectors.driver=['mlx5_core']",
            "drivers",
        ),
    ],
)
def test_an_unknown_key_suggests_the_nearest_valid_one(
    tmp_path: Path, text: str, where: str, meant: str
):
    file = tmp_path / "agent.yaml"
    file.write_text(text)
    with pytest.raises(ConfigError) as caught:
        build_config(file, environ={})
    assert f"{where}: unknown key; did you mean `{meant}`?" in str(caught.value)


def test_an_unknown_key_like_no_other_lists_the_keys(tmp_path: Path):
    file = tmp_path / "agent.yaml"
    file.write_text("nccl:\n  flavour: spicy\n")
    with pytest.raises(ConfigError) as caught:
        build_config(file, environ={})
    assert (
        "nccl.flavour='spicy': unknown key; accepted keys: enabled, socketIfname, gidIndex, "
        "overrides"
    ) in str(caught.value)
