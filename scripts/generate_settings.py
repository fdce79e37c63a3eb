"""Regenerate what is derived from the settings models: docs/configuration.md, and for every
chart value a model field declares (``settings.ChartValue``) its default and comment in the
chart's values.yaml, its schema in values.schema.json and its row in docs/install.md.

`make generate` writes; `--check` (run by the test suite) fails, naming the stale file and,
for values.yaml, each value whose default differs from its declaration, when a model changed
without regenerating. A field that declares a value values.yaml lacks, or a value another
field already owns, stops both, naming the field and the value.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from erdma import settings, settings_values_file
from erdma.agent.config import ENV_PREFIX, AgentConfig
from erdma.agent.installer_config import DriverInstallerConfig
from erdma.agent.nccl import NcclConfig
from erdma.agent.shared_config import SharedResourceConfig, SharedSelectors
from erdma.controller.config import ControllerConfig
from erdma.dra.config import DraConfig
from erdma.settings_chart import ChartDeclarationError, Declared, declared_values, values_table

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "configuration.md"
INSTALL = REPO / "docs" / "install.md"
CHART = REPO / "deploy" / "helm" / "erdma-controller"
SCHEMA = CHART / "values.schema.json"
VALUES = CHART / "values.yaml"

#: the programs the chart configures, as the values table names them
PROGRAMS: dict[str, type[BaseModel]] = {"agent": AgentConfig, "controller": ControllerConfig}
#: the agent's nested settings, each with the heading of its table in docs/configuration.md
AGENT_SECTIONS: list[tuple[str, type[BaseModel]]] = [
    ("`nccl` (file only)", NcclConfig),
    (
        "`driverInstaller` (file only; [installing the driver](modes.md#installing-the-driver))",
        DriverInstallerConfig,
    ),
    ("`sharedResources[]` (file only)", SharedResourceConfig),
    ("`sharedResources[].selectors`", SharedSelectors),
    ("`dra` (file only; [DRA](dra.md))", DraConfig),
]


def doc_regions() -> dict[str, str]:
    agent = settings.reference_table(AgentConfig, ENV_PREFIX)
    for heading, model in AGENT_SECTIONS:
        agent += f"\n{heading}:\n\n{settings.reference_table(model)}"
    return {
        "agent settings": agent,
        "controller settings": settings.reference_table(ControllerConfig),
    }


def render_regions(path: Path, text: str, regions: dict[str, str]) -> str:
    for name, body in regions.items():
        begin, end = f"<!-- BEGIN GENERATED: {name} -->", f"<!-- END GENERATED: {name} -->"
        found = re.search(re.escape(begin) + ".*?" + re.escape(end), text, re.S)
        if found is None:
            raise SystemExit(f"{path}: marker {begin!r} ... {end!r} not found")
        text = f"{text[: found.start()]}{begin}\n\n{body}\n{end}{text[found.end() :]}"
    return text


def render_schema(schema: dict[str, Any], declared: list[Declared]) -> dict[str, Any]:
    """``schema`` with each declared value's property replaced by the one its field declares;
    the objects holding them, and the chart-only values, are the chart's own."""
    for value in declared:
        node = schema
        *parents, leaf = value.path.split(".")
        for part in parents:
            try:
                node = node["properties"][part]
            except KeyError:
                raise SystemExit(f"{SCHEMA}: no object for {part!r} of {value.path}") from None
        node.setdefault("properties", {})[leaf] = value.schema
    return schema


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a file is stale")
    args = parser.parse_args()
    values_text = VALUES.read_text()
    try:
        declared = declared_values(PROGRAMS, yaml.safe_load(values_text))
    except ChartDeclarationError as exc:
        raise SystemExit(f"generate_settings: {exc}") from None
    outputs = {
        DOC: render_regions(DOC, DOC.read_text(), doc_regions()),
        INSTALL: render_regions(
            INSTALL, INSTALL.read_text(), {"chart values": values_table(declared)}
        ),
        SCHEMA: json.dumps(render_schema(json.loads(SCHEMA.read_text()), declared), indent=2)
        + "\n",
        VALUES: settings_values_file.render(values_text, declared),
    }
    stale = [path for path, text in outputs.items() if path.read_text() != text]
    if args.check:
        for line in settings_values_file.drift(values_text, declared):
            print(f"{VALUES.relative_to(REPO)}: {line}", file=sys.stderr)
        for path in stale:
            print(f"{path.relative_to(REPO)} is stale: run `make generate`", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(outputs[path])
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
