"""values.yaml entries of the chart values that the settings models declare.

The generator writes each declared value's default and its ``# --`` comment in place, line by
line, so everything else in the file (the chart-only values such as images, resources and
tolerations, their hand-written comments, the order and the section comments) stays as
written. values.yaml is block-style YAML with one key per line, which is all this reads.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from typing import Any

import yaml

from erdma.settings_chart import Declared, yaml_flow

WIDTH = 100
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_]+):(?: |$)")


def render(text: str, declared: Sequence[Declared]) -> str:
    """``text`` with the default and comment of every declared value rewritten."""
    lines = text.splitlines()
    for value in declared:
        start, end = _span(lines, value.path)
        indent = " " * (len(lines[start]) - len(lines[start].lstrip()))
        first = start
        while first > 0 and lines[first - 1].lstrip().startswith("#"):
            first -= 1
        key = value.path.rsplit(".", 1)[-1]
        entry = [*_comment(value.description, indent), f"{indent}{key}: {yaml_flow(value.default)}"]
        lines[first:end] = entry
    return "\n".join(lines) + "\n"


def drift(text: str, declared: Sequence[Declared]) -> list[str]:
    """One line per declared value whose default in ``text`` is not the declared one."""
    values = yaml.safe_load(text)
    found = []
    for value in declared:
        have = _at(values, value.path.split("."))
        if have != value.default:
            found.append(
                f"{value.path} is {yaml_flow(have)} in values.yaml, but {value.field} "
                f"declares {yaml_flow(value.default)}"
            )
    return found


def _at(values: Any, parts: list[str]) -> Any:
    for part in parts:
        values = values[part]
    return values


def _comment(description: str, indent: str) -> list[str]:
    if not description:
        return []
    wrapped = textwrap.wrap(
        description,
        width=WIDTH - len(indent) - 2,
        initial_indent="-- ",
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [f"{indent}# {line}" for line in wrapped]


def _span(lines: list[str], path: str) -> tuple[int, int]:
    """The line of key ``path`` and the end of its value (nested lines included)."""
    stack: list[tuple[int, str]] = []
    for number, line in enumerate(lines):
        match = _KEY.match(line)
        if match is None:
            continue
        depth = len(match["indent"])
        stack = [(d, k) for d, k in stack if d < depth] + [(depth, match["key"])]
        if ".".join(k for _, k in stack) == path:
            return number, _end(lines, number, depth)
    raise ValueError(
        f"values.yaml: {path} has no line of its own: write its parents in block style"
    )


def _end(lines: list[str], start: int, depth: int) -> int:
    end = start + 1
    for number in range(start + 1, len(lines)):
        stripped = lines[number].lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        if len(lines[number]) - len(stripped) <= depth:
            break
        end = number + 1
    return end
