"""The reference agent's arguments start our agent, each deprecated form warned about once."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from erdma.agent import reference_flags
from erdma.agent.main import agent_command

BOOLS = {"--prestart-container", "--allocate-all-devices", "--local-eri-discovery"}


@pytest.mark.parametrize(
    ("given", "ours"),
    [
        (["--deviceplugin-prestart-container"], ["--prestart-container"]),
        (["--deviceplugin-prestart-container=false"], ["--no-prestart-container"]),
        (["--allocate-all-devices=true"], ["--allocate-all-devices"]),
        (["-local-eri-discovery=True"], ["--local-eri-discovery"]),
        (["-prefer-driver=ofed"], ["--prefer-driver=ofed"]),
        (
            ["--erdma-installer-version", "1.5.9", "--prefer-driver", "compat"],
            ["--prefer-driver", "compat"],
        ),
        (["--erdma-installer-version=1.5.9"], []),
        (["--jumbo-frame-mtu=0"], ["--jumbo-frame-mtu=8500"]),
        (["--jumbo-frame-mtu", "-1"], ["--jumbo-frame-mtu=8500"]),
    ],
)
def test_reference_forms_become_ours_with_a_warning(given: list[str], ours: list[str]) -> None:
    translated, warnings = reference_flags.translate(given, BOOLS)
    assert translated == ours
    assert len(warnings) >= 1 and all("deprecated" in w or "ignored" in w for w in warnings)


@pytest.mark.parametrize(
    "args",
    [
        ["--prestart-container"],
        ["--prefer-driver", "ofed"],
        ["--jumbo-frame-mtu=9000"],
        ["--", "-x"],
    ],
)
def test_our_own_flags_pass_untouched(args: list[str]) -> None:
    assert reference_flags.translate(args, BOOLS) == (args, [])


def test_a_bool_with_a_value_that_is_no_bool_is_left_for_the_parser_to_refuse() -> None:
    result = CliRunner().invoke(agent_command, ["--allocate-all-devices=maybe", "--help"])
    assert result.exit_code == 2
    assert "--allocate-all-devices" in result.output


def test_the_agent_starts_parsing_with_reference_arguments(tmp_path) -> None:
    """`--help` after the reference's flags: they parse, and our help is printed."""
    args = [
        "--deviceplugin-prestart-container=true",
        "--erdma-installer-version=1.5.9",
        "-prefer-driver=compat",
        "--jumbo-frame-mtu=0",
        "--help",
    ]
    result = CliRunner().invoke(agent_command, args)
    assert result.exit_code == 0, result.output
    assert "Run the node agent" in result.output
