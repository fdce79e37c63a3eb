"""The CDI spec files on a node that define erdma's kinds, and the conflicts among them.

Engines (Podman, Docker, containerd, CRI-O: the CDI library's cache) read every `*.yaml` and
`*.json` of their spec directories, later directories over earlier ones. A device defined in a
later directory replaces the same device of an earlier one; a device defined by two files of
the *same* directory is a conflict, and the engine then refuses it, and on Docker 28 and
Podman every device of the kind, as "unresolvable CDI devices". A copy of the spec in the
other format, or under another name, is such a conflict; `erdma cdi list` finds it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from erdma.cdi import KIND
from erdma.dra.claimspec import claim_kind
from erdma.dra.names import DRIVER_NAME

#: where engines read specs, in their order: a later directory wins over an earlier one
SPEC_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
#: the kinds erdma writes: the node's spec and the DRA driver's per-claim specs
KINDS = (KIND, claim_kind(DRIVER_NAME))


@dataclass(frozen=True)
class SpecFile:
    """One spec file of one of our kinds, and the device names it defines."""

    path: Path
    kind: str
    devices: tuple[str, ...]


@dataclass(frozen=True)
class Conflict:
    """Devices that two or more files of one directory define: engines resolve none of them."""

    directory: Path
    names: tuple[str, ...]  # fully qualified: aliyun.com/erdma=erdma_0
    files: tuple[Path, ...]

    def describe(self) -> str:
        files = " and ".join(str(f) for f in self.files)
        return f"{', '.join(self.names)} defined by {files}"


def read_specs(directories: Sequence[Path], kinds: Sequence[str] = KINDS) -> list[SpecFile]:
    """The spec files of ``kinds`` in ``directories``, in the engines' reading order.

    A file that does not parse is skipped, as the engine skips it (and says so only in its
    log); absent directories are skipped too."""
    found = []
    for directory in directories:
        if not directory.is_dir():
            continue
        for path in sorted(directory.iterdir()):
            if path.suffix not in (".yaml", ".json") or not path.is_file():
                continue
            spec = _load(path)
            if spec is not None and spec.get("kind") in kinds:
                devices = spec.get("devices")
                entries = devices if isinstance(devices, list) else []
                names = tuple(str(d.get("name")) for d in entries if isinstance(d, dict))
                found.append(SpecFile(path, str(spec["kind"]), names))
    return found


def _load(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
        loaded = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError):
        return None
    return loaded if isinstance(loaded, dict) else None


def conflicts(specs: Sequence[SpecFile]) -> list[Conflict]:
    """The devices that more than one file of the same directory defines, per set of files."""
    owners: dict[tuple[Path, str], list[Path]] = defaultdict(list)
    for spec in specs:
        for name in spec.devices:
            owners[(spec.path.parent, f"{spec.kind}={name}")].append(spec.path)
    grouped: dict[tuple[Path, tuple[Path, ...]], list[str]] = defaultdict(list)
    for (directory, name), files in owners.items():
        if len(files) > 1:
            grouped[(directory, tuple(files))].append(name)
    return [Conflict(d, tuple(names), files) for (d, files), names in grouped.items()]


def overridden_by(spec: SpecFile, specs: Sequence[SpecFile]) -> Path | None:
    """The file of a later directory that redefines a device of ``spec``, which it then loses."""
    directories = list(dict.fromkeys(s.path.parent for s in specs))
    here = directories.index(spec.path.parent)
    for other in specs:
        if (
            other.kind == spec.kind
            and directories.index(other.path.parent) > here
            and set(other.devices) & set(spec.devices)
        ):
            return other.path
    return None
