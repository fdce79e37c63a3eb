"""Each setting is declared once, in its pydantic model: docs/configuration.md, the chart's
values.yaml defaults and comments, values.schema.json and the values table of docs/install.md
are generated from the models, and this fails when any of them drifts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from erdma import settings
from erdma.agent.config import AgentConfig
from erdma.controller.config import ControllerConfig

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path("scripts") / "generate_settings.py"
CHART = Path("deploy") / "helm" / "erdma-controller"
SCHEMA = REPO / CHART / "values.schema.json"


def _check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / SCRIPT), "--check"], capture_output=True, text=True, check=False
    )


def _edited_copy(tmp_path: Path, name: Path, edit: Callable[[str], str]) -> Path:
    """A copy of what the generator reads and writes, with file ``name`` edited."""
    for part in ("scripts", "docs", "deploy"):
        shutil.copytree(REPO / part, tmp_path / part)
    path = tmp_path / name
    edited = edit(path.read_text())
    assert edited != path.read_text()
    path.write_text(edited)
    return tmp_path


def test_docs_chart_values_and_schema_are_generated_from_the_models():
    result = _check(REPO)
    assert result.returncode == 0, result.stderr


def test_a_stale_schema_is_named(tmp_path: Path):
    def narrower(text: str) -> str:
        data = json.loads(text)
        data["properties"]["agent"]["properties"]["slotsPerDevice"]["maximum"] = 99
        return json.dumps(data, indent=2) + "\n"

    result = _check(_edited_copy(tmp_path, CHART / "values.schema.json", narrower))
    assert result.returncode == 1
    assert "values.schema.json is stale: run `make generate`" in result.stderr


def test_a_default_edited_in_values_yaml_is_named_with_both_values(tmp_path: Path):
    def edit(text: str) -> str:
        return text.replace("  slotsPerDevice: 200\n", "  slotsPerDevice: 100\n", 1)

    result = _check(_edited_copy(tmp_path, CHART / "values.yaml", edit))
    assert result.returncode == 1
    assert (
        "agent.slotsPerDevice is 100 in values.yaml, but AgentConfig.slots_per_device declares 200"
    ) in result.stderr
    assert "values.yaml is stale: run `make generate`" in result.stderr


def test_an_edited_comment_of_a_declared_value_makes_values_yaml_stale(tmp_path: Path):
    def edit(text: str) -> str:
        return text.replace("# -- slots per eRDMA device\n", "# -- Slots, advertised.\n", 1)

    result = _check(_edited_copy(tmp_path, CHART / "values.yaml", edit))
    assert result.returncode == 1
    assert "values.yaml is stale: run `make generate`" in result.stderr


def test_an_edited_row_of_the_install_guides_values_table_is_stale(tmp_path: Path):
    def edit(text: str) -> str:
        return text.replace(
            "| `agent.slotsPerDevice` | `200` |", "| `agent.slotsPerDevice` | `8` |"
        )

    result = _check(_edited_copy(tmp_path, Path("docs") / "install.md", edit))
    assert result.returncode == 1
    assert "docs/install.md is stale: run `make generate`" in result.stderr


def test_a_declared_value_missing_from_values_yaml_stops_the_generator(tmp_path: Path):
    def edit(text: str) -> str:
        return text.replace("  jumboFrameMTU: 8500\n", "", 1)

    result = _check(_edited_copy(tmp_path, CHART / "values.yaml", edit))
    assert result.returncode == 1
    assert (
        "AgentConfig.jumbo_frame_mtu declares chart value agent.jumboFrameMTU, which values.yaml "
        "does not have"
    ) in result.stderr


def test_every_agent_setting_in_the_chart_has_the_models_limits():
    agent = json.loads(SCHEMA.read_text())["properties"]["agent"]["properties"]
    assert agent["slotsPerDevice"] == settings.field_schema(AgentConfig, "slots_per_device")
    assert agent["slotsPerDevice"]["maximum"] == 10000
    assert agent["preferDriver"]["enum"] == ["", "default", "compat", "ofed"]


@pytest.mark.parametrize("model", [AgentConfig, ControllerConfig])
def test_every_setting_has_a_description(model):
    missing = [name for name, info in model.model_fields.items() if not info.description]
    assert missing == []


def test_the_reference_lists_every_setting_once():
    table = settings.reference_table(AgentConfig, "ERDMA_")
    for name, info in AgentConfig.model_fields.items():
        assert table.count(f"| `{settings.key_of(name, info)}` |") == 1
    assert "| `driverInstallCommand` | file only | `ERDMA_DRIVER_INSTALL_COMMAND` |" in table
