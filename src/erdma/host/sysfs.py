"""Small, forgiving readers for sysfs-style trees under an injectable root.

sysfs files can vanish between listing and reading (hot-unplug, module reload) and fixture
trees can hold garbage, so every reader returns None instead of raising and leaves the decision
to the caller, which records why.
"""

from __future__ import annotations

import os
from pathlib import Path


class HostRoot:
    """A host filesystem root: `/` in production, a fixture directory in tests."""

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = Path(root)

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*(p.lstrip("/") for p in parts))

    @property
    def sys(self) -> Path:
        return self.path("sys")

    def __repr__(self) -> str:
        return f"HostRoot({str(self.root)!r})"


def read_text(path: Path) -> str | None:
    """The stripped contents of a small text file, or None when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="strict") as handle:
            return handle.read(4096).strip()
    except (OSError, UnicodeDecodeError):
        return None


def read_int(path: Path, base: int = 10) -> int | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text, base)
    except ValueError:
        return None


def read_code_label(path: Path) -> tuple[int | None, str | None]:
    """Parse `4: ACTIVE`-style files into (4, "ACTIVE")."""
    text = read_text(path)
    if text is None or ":" not in text:
        return None, None
    code, _, label = text.partition(":")
    try:
        return int(code.strip()), label.strip() or None
    except ValueError:
        return None, label.strip() or None


def link_name(path: Path) -> str | None:
    """The last component of a symlink's target (e.g. the driver name), or None."""
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def resolved_name(path: Path) -> str | None:
    """The basename of a fully resolved path (e.g. a PCI address), or None on loops/missing."""
    try:
        return Path(os.path.realpath(path, strict=True)).name
    except OSError:
        return None


def list_dir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []
