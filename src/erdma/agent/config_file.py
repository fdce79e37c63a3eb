"""Reading the agent's configuration file: size, encoding, JSON or YAML (`config_yaml`).

Every problem is a `ConfigError` naming the file, raised before any value is used, so a bad
file can never leave the agent half-configured.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

# a config file is a few kilobytes: refuse what cannot be one before parsing it
MAX_FILE_BYTES = 1 << 20


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
    try:
        data = _parser(path)(text)
    except ValueError as exc:  # the parser's reason: not a document of its kind
        raise ConfigError(f"config file {path}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping, got {type(data).__name__}")
    return data


def _parser(path: Path) -> Callable[[str], Any]:
    """JSON unless the name ends in .yaml/.yml; PyYAML is imported only for those."""
    if path.suffix in (".yaml", ".yml"):
        from erdma.agent.config_yaml import parse_yaml

        return parse_yaml
    kind = path.suffix[1:] or "JSON"

    def parse_json(text: str) -> Any:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid {kind}: {exc}") from None
        except RecursionError:
            raise ValueError(f"not valid {kind}: nested too deeply") from None

    return parse_json
