"""Regenerate what is derived from the settings models: docs/configuration.md and the chart's
values.schema.json properties of every value the chart passes to the agent or the controller.

`make generate` writes; `--check` (run by the test suite) fails, naming the stale file, when a
model changed without regenerating. The chart templates say which value feeds which setting
(`preferDriver: {{ $a.preferDriver | quote }}`, with `$a := .Values.agent` bound in the same
template), so they are parsed, not repeated here.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel

from erdma import settings
from erdma.agent.config import (
    ENV_PREFIX,
    AgentConfig,
    SharedResourceConfig,
    SharedSelectors,
)
from erdma.agent.installer_config import DriverInstallerConfig
from erdma.agent.nccl import NcclConfig
from erdma.controller.config import ControllerConfig
from erdma.dra.config import DraConfig

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "configuration.md"
CHART = REPO / "deploy" / "helm" / "erdma-controller"
SCHEMA = CHART / "values.schema.json"
SETTINGS_TEMPLATES = CHART / "templates" / "_settings.tpl"
CONTROLLER_CONFIG = CHART / "templates" / "controller-config.yaml"

#: the chart's templates of the agent's config file (all lines `key: {{ value }}`)
AGENT_TEMPLATES = ("erdma.agentSettings", "erdma.sharedSettings")
#: `{{- $n := $a.nccl | default dict -}}`: a variable bound to a chart value
_BINDING = re.compile(r"\{\{-? (\$\w+) := (\$\w+|\.Values)\.([\w.]+)(?: \| default dict)? -?\}\}")


def doc_regions() -> dict[str, str]:
    return {
        "agent settings": settings.reference_table(AgentConfig, ENV_PREFIX)
        + "\n`nccl` (file only):\n\n" + settings.reference_table(NcclConfig)
        + "\n`driverInstaller` (file only; [installing the driver]"
        + "(modes.md#installing-the-driver)):\n\n" + settings.reference_table(DriverInstallerConfig)
        + "\n`sharedResources[]` (file only):\n\n" + settings.reference_table(SharedResourceConfig)
        + "\n`sharedResources[].selectors`:\n\n" + settings.reference_table(SharedSelectors)
        + "\n`dra` (file only; [DRA](dra.md)):\n\n" + settings.reference_table(DraConfig),
        "controller settings": settings.reference_table(ControllerConfig),
    }  # fmt: skip


def render_doc(text: str) -> str:
    for name, body in doc_regions().items():
        begin, end = f"<!-- BEGIN GENERATED: {name} -->", f"<!-- END GENERATED: {name} -->"
        found = re.search(re.escape(begin) + ".*?" + re.escape(end), text, re.S)
        if found is None:
            raise SystemExit(f"{DOC}: marker {begin!r} ... {end!r} not found")
        text = f"{text[: found.start()]}{begin}\n\n{body}\n{end}{text[found.end() :]}"
    return text


def _define(text: str, name: str) -> str:
    """The body of template ``name``: up to the next definition or comment block (its own
    `{{- end -}}` included, which holds no key)."""
    start = text.find('{{- define "' + name + '" -}}')
    if start < 0:
        raise SystemExit(f"{SETTINGS_TEMPLATES}: template {name!r} not found")
    following = [i for i in (text.find("{{- define", start + 1), text.find("{{/*", start)) if i > 0]
    return text[start : min(following, default=len(text))]


def _bindings(body: str) -> dict[str, str]:
    """The values path of each variable bound in a template body, in binding order."""
    variables: dict[str, str] = {}
    for name, source, path in _BINDING.findall(body):
        root = "" if source == ".Values" else variables[source]
        variables[name] = ".".join(p for p in (root, path) if p)
    return variables


def agent_mappings(helpers: str) -> Iterator[tuple[str, list[str]]]:
    """(values path, setting key path) for each `key: {{ $a.value }}` line of the agent
    templates; nesting follows indentation, a `- ` item stands for a list element (`[]`)."""
    for template in AGENT_TEMPLATES:
        body = _define(helpers, template)
        variables = _bindings(body)
        stack: list[tuple[int, str]] = []
        for line in body.splitlines():
            match = re.match(r"^(\s*)(- )?(\w+):\s*(.*)$", line)
            if match is None:
                continue
            indent, item, key, value = match.groups()
            depth = len(indent) + (2 if item else 0)
            stack = [(d, k) for d, k in stack if d < depth]
            if item:
                stack.append((len(indent), "[]"))
            path = [k for _, k in stack] + [key]
            stack.append((depth, key))
            found = re.search(r"(\$\w+|\.Values)\.([\w.]+)", value)
            if found and "include" not in value:
                root = variables.get(found.group(1), "") if found.group(1) != ".Values" else ""
                yield ".".join(p for p in (root, found.group(2)) if p), path


def controller_mappings(template: str) -> Iterator[tuple[str, list[str]]]:
    """(values path, config.json key) for each `"key" <value>` pair of controller-config.yaml
    whose value is a plain chart value (optionally `int`-converted or defaulted)."""
    variables = _bindings(template)
    for key, value in re.findall(r'^\s*"(\w+)" (.+)$', template, re.M):
        found = re.fullmatch(r"\(?(?:int )?(\$\w+|\.Values)\.([\w.]+)(?: \| default .*)?\)?", value)
        if found:
            root = variables.get(found.group(1), "") if found.group(1) != ".Values" else ""
            yield ".".join(p for p in (root, found.group(2)) if p), [key]


def setting_schema(model: type[BaseModel], path: list[str]) -> dict[str, Any]:
    """The reduced JSON schema of the setting at key ``path`` (``[]`` steps into a list)."""
    head, rest = path[0], path[1:]
    name, info = next(
        (n, i) for n, i in model.model_fields.items() if settings.key_of(n, i) == head
    )
    if not rest:
        return settings.field_schema(model, name)
    annotation = info.annotation
    if rest[0] == "[]":
        (annotation,) = get_args(annotation)
        rest = rest[1:]
    if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)) or get_origin(
        annotation
    ):
        raise SystemExit(f"setting {'.'.join(path)}: {head} has no nested keys")
    return setting_schema(annotation, rest)


def render_schema(schema: dict[str, Any]) -> dict[str, Any]:
    helpers, controller = SETTINGS_TEMPLATES.read_text(), CONTROLLER_CONFIG.read_text()
    sources: list[tuple[type[BaseModel], tuple[str, list[str]]]]
    sources = [(AgentConfig, m) for m in agent_mappings(helpers)]
    sources += [(ControllerConfig, m) for m in controller_mappings(controller)]
    written: dict[str, dict[str, Any]] = {}
    for model, (values_path, key_path) in sources:
        wanted = setting_schema(model, key_path)
        if values_path in written:  # one value feeding two programs: they must agree
            ignore = {"description"}
            if {k: v for k, v in written[values_path].items() if k not in ignore} != {
                k: v for k, v in wanted.items() if k not in ignore
            }:
                raise SystemExit(f"value {values_path} feeds settings that disagree: {key_path}")
            continue
        _place(schema, values_path, wanted)
        written[values_path] = wanted
    return schema


def _place(schema: dict[str, Any], values_path: str, wanted: dict[str, Any]) -> None:
    node = schema
    parts = values_path.split(".")
    for part in parts[:-1]:
        try:
            node = node["properties"][part]
        except KeyError:
            raise SystemExit(f"{SCHEMA}: no object for {part!r} of value {values_path}") from None
    node.setdefault("properties", {})[parts[-1]] = wanted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a file is stale")
    args = parser.parse_args()
    outputs = {
        DOC: render_doc(DOC.read_text()),
        SCHEMA: json.dumps(render_schema(json.loads(SCHEMA.read_text())), indent=2) + "\n",
    }
    stale = [path for path, text in outputs.items() if path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(REPO)} is stale: run `make generate`", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(outputs[path])
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
