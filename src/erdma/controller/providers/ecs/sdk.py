"""The official ECS SDK (``alibabacloud_ecs20140526``) with its models loaded one at a time.

The SDK's ``models/__init__.py`` imports all of its 1,152 model modules (every request and
response of every ECS action, 2,085 classes) as soon as the client is imported, which costs the
controller about 15 MiB of resident memory for the dozen models it ever uses. ``load`` puts a
module in that package's place which knows, from the text of the SDK's own ``__init__.py``,
which file defines each name, and imports that file the first time the name is asked for. The
classes are the SDK's own, so the requests the controller sends and the responses it parses
are exactly those of the official models; only the unused ones are never loaded.

Where the SDK's models package is already imported (by another library in the same process,
or a test), that one is used as it is; where its ``__init__.py`` has a form this reader does
not know (a future SDK), the package is imported as usual rather than guessed at.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

PACKAGE = "alibabacloud_ecs20140526"
MODELS = f"{PACKAGE}.models"

#: ``from ._describe_instances_request import DescribeInstancesRequest, ...`` in the SDK's file
_EXPORT = re.compile(r"from \.(\w+) import ([\w ,]+)")
_FUTURE = "from __future__ import annotations"


def model_files(init_text: str) -> dict[str, str]:
    """Exported name -> the model module that defines it, read from ``models/__init__.py``.

    Empty when the file holds any statement besides these imports and the closing ``__all__``
    (a form not understood).
    """
    where: dict[str, str] = {}
    for line in init_text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped == _FUTURE:
            continue
        if stripped.startswith("__all__"):  # the same names again, closing the file
            break
        match = _EXPORT.fullmatch(stripped)
        if match is None:
            return {}
        for name in match.group(2).split(","):
            where[name.strip()] = match.group(1)
    return where


class LazyModels(types.ModuleType):
    """The SDK's models package, each model module imported on first use of one of its names."""

    def __init__(self, spec: ModuleSpec, where: dict[str, str]) -> None:
        super().__init__(MODELS)
        self.__spec__ = spec  # what importlib reports for the package, as for the real one
        self.__loader__ = spec.loader
        self.__path__ = list(spec.submodule_search_locations or ())
        self.__package__ = MODELS
        self.__file__ = spec.origin
        self._where = where

    def __getattr__(self, name: str) -> Any:
        module = self._where.get(name)
        if module is None:
            raise AttributeError(f"module {MODELS!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{MODELS}.{module}"), name)
        setattr(self, name, value)
        return value

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._where})


def load() -> tuple[Any, Any]:
    """(the SDK's models package, its ``Client`` class), the models loaded lazily if possible."""
    if MODELS not in sys.modules:
        spec = importlib.util.find_spec(MODELS)  # imports the (small) parent package only
        if spec is not None and spec.origin and spec.submodule_search_locations:
            where = model_files(Path(spec.origin).read_text(encoding="utf-8"))
            if where:
                lazy = LazyModels(spec, where)
                sys.modules[MODELS] = lazy
                sys.modules[PACKAGE].models = lazy  # type: ignore[attr-defined]
    client = importlib.import_module(f"{PACKAGE}.client")  # imports the models package too
    return sys.modules[MODELS], client.Client
