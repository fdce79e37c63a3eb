"""Imports every ``*_faults`` module of this package, each of which registers its scenarios."""

from __future__ import annotations

import importlib
import pkgutil

import bench.chaos

for module in pkgutil.iter_modules(bench.chaos.__path__):
    if module.name.endswith("_faults"):
        importlib.import_module(f"bench.chaos.{module.name}")
