"""What the agent imports: the chart's JSON config and the default strategy need no PyYAML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from erdma.agent.config import build_config
from erdma.agent.config_file import ConfigError
from tests.unit.import_graph import modules_after


def test_the_agent_reading_a_json_config_never_imports_yaml(tmp_path: Path):
    config = tmp_path / "agent.json"
    config.write_text(json.dumps({"slotsPerDevice": 10}))
    modules = modules_after(
        "import erdma.agent.main\nfrom pathlib import Path\n"
        "from erdma.agent.config import build_config\n"
        f"build_config(Path({str(config)!r}), environ={{'NODE_NAME': 'n'}})"
    )
    assert "erdma.agent.main" in modules
    assert not {m for m in modules if m == "yaml" or m.startswith("yaml.")}


def test_a_yaml_config_is_still_read(tmp_path: Path):
    config = tmp_path / "agent.yml"
    config.write_text("slotsPerDevice: 10\n")
    assert build_config(config, environ={"NODE_NAME": "n"}).slots_per_device == 10


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("agent.json", "{", r"agent.json: not valid json: Expecting property name"),
        ("agent", "[" * 100_000, r"agent: not valid JSON: nested too deeply"),
        ("agent.yaml", "a: [", r"agent.yaml: not valid yaml: .* at line 1, column 5"),
    ],
)
def test_a_broken_file_names_itself_and_its_kind(
    tmp_path: Path, name: str, text: str, message: str
):
    config = tmp_path / name
    config.write_text(text)
    with pytest.raises(ConfigError, match=message):
        build_config(config, environ={"NODE_NAME": "n"})
