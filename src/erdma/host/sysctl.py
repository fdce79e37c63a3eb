"""Sysctls of the calling thread's network namespace, read and written through /proc/sys.

Per-namespace knobs (net.smc.*, net.ipv6.*) show the namespace of the thread that opens them,
so callers enter the namespace first (`host.netns`) and then use these readers.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


class SysctlError(RuntimeError):
    """A sysctl could not be set; the message names the key, the value, the path and the cause."""


@dataclass(frozen=True)
class Sysctls:
    """/proc/sys of the calling thread's network namespace, under an injectable proc root.

    `overrides` maps a key prefix (e.g. "net.smc") to another proc root, for trees the running
    kernel lacks.
    """

    proc_root: Path = Path("/proc")
    overrides: Mapping[str, Path] = field(default_factory=dict)

    def path(self, key: str) -> Path:
        root = next(
            (r for p, r in self.overrides.items() if key == p or key.startswith(p + ".")),
            self.proc_root,
        )
        return root / "sys" / key.replace(".", "/")

    def exists(self, key: str) -> bool:
        """Whether the kernel offers `key`: a kernel build or boot option can drop one knob."""
        return self.path(key).exists()

    def table_exists(self, key: str) -> bool:
        """Whether the directory holding `key` exists: absent while its module is not loaded."""
        return self.path(key).parent.is_dir()

    def read(self, key: str) -> str | None:
        """The stripped value of `key`, None when the knob is absent.

        Other failures raise OSError: callers tell "the kernel lacks it" from "could not read it".
        """
        path = self.path(key)
        return path.read_text().strip() if path.exists() else None

    def write(self, key: str, value: str) -> None:
        path = self.path(key)
        try:
            path.write_text(value)
        except OSError as exc:
            hint = (
                " (/proc/sys is read-only here: run privileged)" if exc.errno == errno.EROFS else ""
            )
            raise SysctlError(f"cannot set {key}={value} at {path}: {exc.strerror}{hint}") from exc
