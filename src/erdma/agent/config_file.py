"""Reading the agent's configuration file: size, encoding, YAML or JSON, and alias bombs.

Every problem is a `ConfigError` naming the file, raised before any value is used, so a bad
file can never leave the agent half-configured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

# a config file is a few kilobytes: refuse what cannot be one before parsing it
MAX_FILE_BYTES = 1 << 20
# YAML nodes after aliases are expanded: a billion-laughs file is refused before it is built
MAX_YAML_NODES = 100_000


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message says which and why."""


def load_file(path: Path) -> dict[str, Any]:
    """A YAML or JSON mapping; a missing, unreadable, oversized or non-mapping file is a
    ConfigError naming the file."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"config file {path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
            f"{exc.start})"
        ) from None
    kind = path.suffix[1:] or "JSON"
    try:
        data = _load_yaml(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(f"config file {path}: not valid {kind}: {_problem(exc)}") from None
    except _TooLarge as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping, got {type(data).__name__}")
    return data


def _problem(exc: Exception) -> str:
    """What is wrong, on one line: PyYAML's own message spans several, with a caret drawing."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark, context = exc.problem_mark, f"{exc.context}: " if exc.context else ""
        return f"{context}{exc.problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(exc).split())


class _TooLarge(Exception):
    """A YAML document whose aliases expand past MAX_YAML_NODES (or refer to themselves)."""


def _load_yaml(text: str) -> Any:
    """`yaml.safe_load`, refusing documents whose aliases would expand past MAX_YAML_NODES
    before any Python object is built (the "billion laughs" file)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, {}, set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded_size(node: yaml.Node, sizes: dict[int, int], active: set[int]) -> int:
    """How many nodes `node` stands for once every alias is expanded; each node counted once."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in active:
        raise _TooLarge("a YAML alias refers to the node that contains it; aliases are refused")
    active.add(key)
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, sizes, active) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            size += _expanded_size(k, sizes, active) + _expanded_size(v, sizes, active)
    if size > MAX_YAML_NODES:
        raise _TooLarge(
            f"YAML aliases expand to more than {MAX_YAML_NODES} values (an alias bomb?); "
            "write the values out"
        )
    active.discard(key)
    sizes[key] = size
    return size
