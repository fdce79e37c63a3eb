"""The `erdma` entry point: every subcommand resolves and carries its help."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from erdma.cli import COMMANDS, main


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_subcommand_loads_and_has_help(name: str) -> None:
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_unknown_subcommand_is_an_error() -> None:
    result = CliRunner().invoke(main, ["frobnicate"])
    assert result.exit_code != 0 and "No such command 'frobnicate'" in result.output
