"""Everything a program derives from its settings model, so each setting is declared once.

A pydantic model (the agent's `AgentConfig`, the controller's `ControllerConfig`) is the only
declaration of a setting: its alias is the file key, its ``description`` the help text, and
``json_schema_extra`` says where else it appears: ``flag: False`` for file-only settings such
as a command that may carry a token; ``env`` for extra environment names kept from the
reference; ``secret`` for a value never logged; ``chart`` for what the chart's schema restricts
further, e.g. with its label-map definition: ``{"chart": {"definition": "labelMap"}}``. A
``ChartValue`` marker in the field's ``Annotated`` type names the Helm value that sets it. From
it come the command-line flags, the environment variables, the key names in error messages, the
configuration reference in docs/, the chart's values.yaml entry and JSON schema, the install
guide's values table, the redacted start-up log line, and the explanation of a bad value or an
unknown key (with the key that was probably meant).
"""

from __future__ import annotations

import difflib
import enum
import inspect
import json
import re
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import click
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

F = Callable[..., Any]
#: JSON-schema keywords the chart's values.schema.json takes over from a model field
SCHEMA_KEYS = (
    "type",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "pattern",
    "items",
    "propertyNames",
    "additionalProperties",
    "description",
)


#: ``ChartValue.default`` when the chart's default is the setting's own
MODEL_DEFAULT: Any = object()


@dataclass(frozen=True)
class ChartValue:
    """The Helm value that sets a field: ``Annotated[int, ChartValue("agent.slotsPerDevice")]``.

    The value's default, comment in values.yaml, schema and row in the install guide are
    generated from the field (scripts/generate_settings.py), so a setting is declared once.
    ``description`` and ``default`` are the chart's own where they differ from the setting's
    (the chart's value also decides which pods get which privilege, or the chart has a
    different default for its DaemonSet). A value that feeds settings of two programs is
    declared by one field; every other field it feeds says ``owner=False``, and the generator
    checks that their schemas agree.
    """

    path: str
    description: str | None = None
    default: Any = MODEL_DEFAULT
    owner: bool = True


def chart_values(info: FieldInfo) -> list[ChartValue]:
    """The chart values a field declares (none for a setting the chart does not pass)."""
    return [item for item in info.metadata if isinstance(item, ChartValue)]


def _extra(info: FieldInfo) -> dict[str, Any]:
    extra = info.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def key_of(name: str, info: FieldInfo) -> str:
    """The key as people write it in a file: the alias, else the field name."""
    return info.alias or name


def flag_of(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def has_flag(info: FieldInfo) -> bool:
    """Top-level scalars and string lists get a flag; nested models are file-only."""
    if _extra(info).get("flag") is False:
        return False
    return not _is_model(info.annotation)


def env_names(prefix: str, name: str, info: FieldInfo) -> list[str]:
    """``ERDMA_PREFER_DRIVER`` for every flag, then names kept for compatibility (NODE_NAME)."""
    if not has_flag(info) and not _extra(info).get("env"):
        return []
    own = [f"{prefix}{name.upper()}"] if has_flag(info) else []
    return own + list(_extra(info).get("env", ()))


def flagged_fields(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo]]:
    return ((n, i) for n, i in model.model_fields.items() if has_flag(i))


def cli_options(model: type[BaseModel], env_prefix: str) -> Callable[[F], F]:
    """A click decorator with one option per flagged field; an option not given is None, so
    it does not override the file or the environment."""

    def decorate(command: F) -> F:
        for name, info in reversed(list(flagged_fields(model))):
            command = _option(name, info, partial(_help_text, model, env_prefix, name))(command)
        return command

    return decorate


def _help_text(model: type[BaseModel], env_prefix: str, name: str) -> str:
    """An option's help: the field's description, its default, what it accepts and its
    environment names (an option's own default is None, so click cannot show the setting's)."""
    info = model.model_fields[name]
    accepted = _accepted(model, name)
    envs = ", ".join(env_names(env_prefix, name, info))
    notes = [f"default: {_help_default(info)}", accepted and f"accepted: {accepted}", f"env {envs}"]
    joined = " (comma-joined)" if get_origin(info.annotation) is list else ""
    return f"{info.description or ''} [{'; '.join(n for n in notes if n)}]{joined}"


def _help_default(info: FieldInfo) -> str:
    """The default as it is typed on a command line: a string or list without JSON's quotes
    and brackets; `""` for the empty string."""
    text = _default_text(info).strip("`")
    try:
        value = json.loads(text)
    except ValueError:  # a description such as `$NODE_NAME` or in-cluster
        return text
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "none"
    return value if isinstance(value, str) and value else text


class _SettingOption(click.Option):
    """An option whose help is written when someone reads it: what a setting accepts comes
    from the model's JSON schema, and building that on every start of a program (tenths of a
    second, and a validator per default kept in memory) would pay for a text only ``--help``
    shows."""

    def __init__(self, *args: Any, describe: Callable[[], str], **kwargs: Any) -> None:
        self._describe: Callable[[], str] | None = describe
        self._help: str | None = None
        super().__init__(*args, **kwargs)

    @property
    def help(self) -> str | None:
        if self._describe is not None:
            self._help, self._describe = inspect.cleandoc(self._describe()), None
        return self._help

    @help.setter
    def help(self, value: str | None) -> None:
        self._help = value


def _option(name: str, info: FieldInfo, describe: Callable[[], str]) -> Callable[[F], F]:
    flag = flag_of(name)
    base = _base_type(info.annotation)
    lazy: dict[str, Any] = {"cls": _SettingOption, "describe": describe, "default": None}
    if base is bool:
        return click.option(f"{flag}/--no-{flag[2:]}", name, **lazy)
    if base is int or base is float:
        return click.option(flag, name, type=base, **lazy)
    if base is Path:
        return click.option(flag, name, type=click.Path(path_type=Path), **lazy)
    return click.option(flag, name, **lazy)


def _base_type(annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        (inner,) = [a for a in get_args(annotation) if a is not type(None)]
        return _base_type(inner)
    return annotation


def _is_model(annotation: Any) -> bool:
    return model_in(annotation) is not None


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, itself or as list items; None for a scalar field."""
    base = _base_type(annotation)
    if get_origin(base) is list:
        base = get_args(base)[0]
    return base if isinstance(base, type) and issubclass(base, BaseModel) else None


#: characters of a bad value quoted in an error message
MAX_SHOWN = 200


def explain(model: type[BaseModel], errors: Sequence[ErrorDetails], flags: bool = True) -> str:
    """One clause per error: the key as people write it (the file key, with its flag where
    ``flags`` and it has one), the value, and what is wrong with it."""
    lines = []
    for item in errors:
        loc = [str(p) for p in item["loc"]]
        if loc and loc[0] in model.model_fields:
            info = model.model_fields[loc[0]]
            key = key_of(loc[0], info)
            flagged = flags and has_flag(info) and len(loc) == 1
            loc[0] = f"{key} ({flag_of(loc[0])})" if flagged else key
        shown = repr(item.get("input"))
        if len(shown) > MAX_SHOWN:  # a huge value must not make a huge error line
            shown = shown[: MAX_SHOWN - 3] + "..."
        wrong = (
            unknown_key(model, item["loc"]) if item["type"] == "extra_forbidden" else item["msg"]
        )
        lines.append(f"{'.'.join(loc) or '(root)'}={shown}: {wrong}")
    return "; ".join(lines)


def unknown_key(model: type[BaseModel], loc: Sequence[str | int]) -> str:
    """What to say of the key at ``loc`` that ``model`` does not have: the accepted key that
    looks most like it (a misspelling is the usual cause), else every key accepted there."""
    accepted = _keys_at(model, loc[:-1])
    by_lower = {key.lower(): key for key in accepted}
    close = difflib.get_close_matches(str(loc[-1]).lower(), list(by_lower), n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean `{by_lower[close[0]]}`?"
    return f"unknown key; accepted keys: {', '.join(accepted)}" if accepted else "unknown key"


def _keys_at(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The keys a file may hold at ``loc`` (list indices skipped), as people write them."""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        fields = current.model_fields
        info = next((i for n, i in fields.items() if part in (n, i.alias)), None)
        current = model_in(info.annotation) if info is not None else None
    return [key_of(n, i) for n, i in current.model_fields.items()] if current else []


def field_schema(model: type[BaseModel], name: str, chart: bool = True) -> dict[str, Any]:
    """The JSON schema of one field, references resolved, reduced to `SCHEMA_KEYS`; with
    ``chart`` the chart's own further restrictions are added (the schema helm checks)."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    info = model.model_fields[name]
    return _reduce(schema["properties"][key_of(name, info)], schema.get("$defs", {}), chart)


def _reduce(prop: dict[str, Any], defs: dict[str, Any], chart: bool = True) -> dict[str, Any]:
    if "$ref" in prop:  # a nested model or enum; its docstring is no setting's description
        target = defs[prop["$ref"].split("/")[-1]]
        prop = {
            **{k: v for k, v in target.items() if k != "description"},
            **{k: v for k, v in prop.items() if k != "$ref"},
        }
    if "anyOf" in prop:  # Optional[X]: X's keywords, with "null" added to its type
        options = [_reduce(p, defs, chart) for p in prop["anyOf"]]
        merged = {k: v for o in options for k, v in o.items() if k != "type"}
        merged["type"] = [o["type"] for o in options if "type" in o]
        prop = {**merged, **{k: v for k, v in prop.items() if k != "anyOf"}}
    out = {k: prop[k] for k in SCHEMA_KEYS if k in prop}
    if prop.get("format") == "path":
        out["type"] = "string"
    if "const" in prop:
        out["enum"] = [prop["const"]]
    for key in ("items", "additionalProperties", "propertyNames"):
        if isinstance(out.get(key), dict):
            out[key] = _reduce(out[key], defs, chart)
    if prop.get("type") == "object" and "properties" in prop:  # a nested model
        out["additionalProperties"] = False
        out["properties"] = {k: _reduce(v, defs, chart) for k, v in prop["properties"].items()}
    extra = prop.get("chart")  # a restriction only the chart adds (with its own definitions)
    if chart and isinstance(extra, dict):
        extra = _chart_refs(extra)
        return extra if "$ref" in extra else {**out, **extra}
    return out


def _chart_refs(value: Any) -> Any:
    """``{"definition": "glob"}`` -> ``{"$ref": "#/definitions/glob"}`` (pydantic would try
    to resolve a ``$ref`` written in the model itself)."""
    if isinstance(value, dict):
        if set(value) == {"definition"}:
            return {"$ref": f"#/definitions/{value['definition']}"}
        return {k: _chart_refs(v) for k, v in value.items()}
    return value


BOUNDS = (
    ("minimum", ">="),
    ("exclusiveMinimum", ">"),
    ("maximum", "<="),
    ("exclusiveMaximum", "<"),
)


def _default_text(info: FieldInfo) -> str:
    extra = _extra(info)
    if "default_text" in extra:
        return str(extra["default_text"])
    default = info.get_default(call_default_factory=True)
    if isinstance(default, BaseModel):
        return "see below" if type(default).model_fields else "{}"
    if isinstance(default, enum.Enum):
        default = default.value
    if isinstance(default, Path):
        default = str(default)
    if isinstance(default, list) and default and isinstance(default[0], BaseModel):
        return f"{len(default)} entry"
    return f"`{json.dumps(default)}`"


def _accepted(model: type[BaseModel], name: str) -> str:
    return accepted_text(field_schema(model, name, chart=False))


def accepted_text(schema: dict[str, Any]) -> str:
    """What a (reduced) schema accepts, in a few words: its values, bounds or pattern."""
    if "enum" in schema:
        return ", ".join(json.dumps(v) if v == "" else str(v) for v in schema["enum"])
    bounds = [f"{op} {schema[key]}" for key, op in BOUNDS if key in schema]
    if bounds:
        return " and ".join(bounds)
    if "pattern" in schema:
        return f"matches {schema['pattern']}"
    return ""


def reference_table(model: type[BaseModel], env_prefix: str | None = None) -> str:
    """The Markdown reference of every setting of ``model``, in declaration order; with an
    ``env_prefix`` the settings also have flags and environment names (the agent's)."""
    with_flags = env_prefix is not None
    head = ["key", "flag", "environment"] if with_flags else ["key"]
    head += ["default", "accepted", "meaning"]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, info in model.model_fields.items():
        cells = [f"`{key_of(name, info)}`"]
        if with_flags:
            cells.append(f"`{flag_of(name)}`" if has_flag(info) else "file only")
            envs = env_names(env_prefix or "", name, info)
            cells.append(", ".join(f"`{e}`" for e in envs))
        accepted = _accepted(model, name)
        cells += [_default_text(info), accepted and f"`{accepted}`", info.description or ""]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


REDACTED = "<redacted>"
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")


def redacted(config: BaseModel) -> dict[str, Any]:
    """``config`` as JSON for a log line: ``secret`` settings replaced, and the user:password
    part of every URL hidden (a token in a command or a URL must not reach the logs)."""
    data = config.model_dump(mode="json")
    for name, info in type(config).model_fields.items():
        if _extra(info).get("secret") and data.get(name):
            data[name] = REDACTED
    return _hide_userinfo(data)


def _hide_userinfo(value: Any) -> Any:
    if isinstance(value, str):
        return _URL_USERINFO.sub(rf"\g<scheme>{REDACTED}@", value)
    if isinstance(value, dict):
        return {k: _hide_userinfo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_hide_userinfo(v) for v in value]
    return value
