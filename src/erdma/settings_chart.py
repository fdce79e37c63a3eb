"""The Helm chart values that the settings models declare with ``settings.ChartValue``.

Each declared value has one owning field, whose default, description and schema become the
value's entry in values.yaml, values.schema.json and the install guide's table; a value must
already be a key of values.yaml, so a misspelt path fails here instead of adding a value no
template reads. Checked once, by scripts/generate_settings.py, never by a running program.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, get_origin

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python

from erdma import settings

#: ``Annotated`` for a field's type built at run time (a value, not a type, to mypy)
_ANNOTATED: Any = Annotated

#: characters that end a plain (unquoted) scalar inside a YAML flow collection
_FLOW_INDICATORS = frozenset(",[]{}#&*!|>'\"%@`")


class ChartDeclarationError(ValueError):
    """A field declares a chart value that values.yaml lacks, or that another field owns."""


@dataclass(frozen=True)
class Declared:
    """One chart value as its owning field declares it."""

    path: str  # "agent.slotsPerDevice"
    field: str  # "AgentConfig.slots_per_device", for messages
    default: Any  # as JSON
    description: str
    schema: dict[str, Any]
    feeds: list[str]  # "agent `slotsPerDevice`", and every other setting it sets


@dataclass(frozen=True)
class _Marked:
    value: settings.ChartValue
    model: type[BaseModel]
    name: str
    setting: str  # "agent `sharedResources[].name`"

    @property
    def field(self) -> str:
        return f"{self.model.__name__}.{self.name}"


def declared_values(
    programs: Mapping[str, type[BaseModel]], values: Mapping[str, Any]
) -> list[Declared]:
    """Every chart value the ``programs``' models declare (nested models included), in
    declaration order; ``values`` is the chart's values.yaml."""
    marked = [m for program, model in programs.items() for m in _marked(model, program, "")]
    owned: dict[str, Declared] = {}
    for mark in (m for m in marked if m.value.owner):
        path = mark.value.path
        if path in owned:
            raise ChartDeclarationError(
                f"{owned[path].field} and {mark.field} both declare chart value {path}: one "
                f"field owns it, the other says ChartValue({path!r}, owner=False)"
            )
        if not _has(values, path.split(".")):
            raise ChartDeclarationError(
                f"{mark.field} declares chart value {path}, which values.yaml does not have: "
                "correct the path, or add the key to values.yaml"
            )
        owned[path] = _declared(mark)
    for mark in (m for m in marked if not m.value.owner):
        owner = owned.get(mark.value.path)
        if owner is None:
            raise ChartDeclarationError(
                f"{mark.field} is fed by chart value {mark.value.path}, which no field owns"
            )
        if _shape(_declared(mark).schema) != _shape(owner.schema):
            raise ChartDeclarationError(
                f"chart value {mark.value.path} feeds {owner.field} and {mark.field}, "
                "whose schemas differ"
            )
        owner.feeds.append(mark.setting)
    return list(owned.values())


def _marked(model: type[BaseModel], program: str, prefix: str) -> Iterator[_Marked]:
    for name, info in model.model_fields.items():
        key = prefix + settings.key_of(name, info)
        for value in settings.chart_values(info):
            yield _Marked(value, model, name, f"{program} `{key}`")
        nested = settings.model_in(info.annotation)
        if nested is not None:
            items = "[]" if get_origin(info.annotation) is list else ""
            yield from _marked(nested, program, f"{key}{items}.")


def _has(values: Any, parts: Sequence[str]) -> bool:
    if not parts:
        return True
    return isinstance(values, dict) and parts[0] in values and _has(values[parts[0]], parts[1:])


def _declared(mark: _Marked) -> Declared:
    info = mark.model.model_fields[mark.name]
    default = mark.value.default
    if default is settings.MODEL_DEFAULT:
        default = to_jsonable_python(info.get_default(call_default_factory=True), by_alias=True)
    else:  # the chart's own default must be one the setting accepts
        try:
            field_type = _ANNOTATED[(info.annotation, *info.metadata)]  # with constraints
            TypeAdapter(field_type).validate_python(default)
        except ValidationError as exc:
            raise ChartDeclarationError(
                f"{mark.field} declares chart value {mark.value.path} with default "
                f"{default!r}, which the setting refuses: {exc.errors()[0]['msg']}"
            ) from None
    description = mark.value.description or info.description or ""
    schema = settings.field_schema(mark.model, mark.name)
    if description and "$ref" not in schema:
        schema["description"] = description
    return Declared(
        mark.value.path, mark.field, _whole(default), description, schema, [mark.setting]
    )


def _whole(value: Any) -> Any:
    """43200.0 -> 43200: a float setting's whole default is an integer in the chart."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _shape(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != "description"}


def yaml_flow(value: Any) -> str:
    """``value`` as one line of YAML flow style, strings unquoted where YAML reads them back
    unchanged: how a declared default is written in values.yaml and in the install guide."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{yaml_flow(k)}: {yaml_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(yaml_flow(v) for v in value) + "]"
    if isinstance(value, str) and _plain(value):
        return value
    return json.dumps(value)


def _plain(text: str) -> bool:
    if not text or text != text.strip() or ": " in text or _FLOW_INDICATORS & set(text):
        return False
    try:
        return bool(yaml.safe_load(text) == text)
    except yaml.YAMLError:
        return False


def values_table(declared: Sequence[Declared]) -> str:
    """The Markdown table of the declared values, by path: default, what the chart's schema accepts,
    meaning, and the settings each one sets."""
    rows = ["| value | default | accepted | meaning | sets |", "| --- | --- | --- | --- | --- |"]
    for value in sorted(declared, key=lambda d: d.path):
        accepted = settings.accepted_text(value.schema)
        cells = [
            f"`{value.path}`",
            f"`{yaml_flow(value.default)}`",
            accepted and f"`{accepted}`",
            value.description,
            ", ".join(value.feeds),
        ]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"
