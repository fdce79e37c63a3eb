"""Each setting is declared once, in its pydantic model: docs/configuration.md and the chart's
values.schema.json are generated from the models, and this fails when either is stale."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from erdma import settings
from erdma.agent.config import AgentConfig
from erdma.controller.config import ControllerConfig

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "generate_settings.py"
SCHEMA = REPO / "deploy" / "helm" / "erdma-controller" / "values.schema.json"


def test_docs_and_chart_schema_are_generated_from_the_models():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_a_stale_file_is_named(tmp_path: Path):
    """The check fails, naming the file, when the schema and the model disagree."""
    copy = tmp_path / "repo"
    copy.mkdir()
    for part in ("scripts", "docs", "deploy"):
        subprocess.run(["cp", "-r", str(REPO / part), str(copy / part)], check=False)
    schema = copy / "deploy" / "helm" / "erdma-controller" / "values.schema.json"
    data = json.loads(schema.read_text())
    data["properties"]["agent"]["properties"]["slotsPerDevice"]["maximum"] = 99
    schema.write_text(json.dumps(data, indent=2) + "\n")
    result = subprocess.run(
        [sys.executable, str(copy / "scripts" / "generate_settings.py"), "--check"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert "values.schema.json is stale: run `make generate`" in result.stderr


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
