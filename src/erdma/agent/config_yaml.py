"""YAML configuration files, refusing alias bombs; imported only when a file is `.yaml`/`.yml`.

Kept apart from `config_file` so that the agent the chart installs (which reads JSON) never
imports PyYAML: its 18 modules are about 1 MiB of the agent's resident memory. It depends on
nothing of the agent: a document that is not valid YAML is a `ValueError` with the reason,
which `config_file` reports with the file's name.
"""

from __future__ import annotations

from typing import Any

import yaml

# YAML nodes after aliases are expanded: a billion-laughs file is refused before it is built
MAX_YAML_NODES = 100_000


def parse_yaml(text: str) -> Any:
    """`yaml.safe_load`, refusing documents whose aliases would expand past MAX_YAML_NODES
    before any Python object is built (the "billion laughs" file)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, {}, set())
        return loader.construct_document(node)
    except (yaml.YAMLError, RecursionError) as exc:
        raise ValueError(f"not valid yaml: {_problem(exc)}") from None
    finally:
        loader.dispose()


def _problem(exc: Exception) -> str:
    """What is wrong, on one line: PyYAML's own message spans several, with a caret drawing."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark, context = exc.problem_mark, f"{exc.context}: " if exc.context else ""
        return f"{context}{exc.problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(exc).split())


def _expanded_size(node: yaml.Node, sizes: dict[int, int], active: set[int]) -> int:
    """How many nodes `node` stands for once every alias is expanded; each node counted once."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in active:
        raise ValueError("a YAML alias refers to the node that contains it; aliases are refused")
    active.add(key)
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, sizes, active) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            size += _expanded_size(k, sizes, active) + _expanded_size(v, sizes, active)
    if size > MAX_YAML_NODES:
        raise ValueError(
            f"YAML aliases expand to more than {MAX_YAML_NODES} values (an alias bomb?); "
            "write the values out"
        )
    active.discard(key)
    sizes[key] = size
    return size
