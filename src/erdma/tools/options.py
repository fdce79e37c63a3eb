"""The `--root` option of the tools that read a host tree, declared once so each checks it alike.

A root that does not exist is a mistyped path, never a host without RDMA devices: reading it
anyway would report "the erdma kernel module is not loaded" about a directory that is not
there, so click refuses it, naming the path, before anything is read (exit 2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])
#: an existing directory; the value stays a str, as the readers take it
EXISTING_DIR = click.Path(exists=True, file_okay=False)


def root_option(help_text: str) -> Callable[[F], F]:
    """`--root DIR` (default `/`): the host root a tool reads."""
    return click.option("--root", default="/", show_default=True, type=EXISTING_DIR, help=help_text)
