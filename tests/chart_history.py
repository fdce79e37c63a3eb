"""Earlier versions of the chart, read from git: the upgrade tests render the previous version
the way a running release was installed, then this one over its values.

"Previous" is the newest commit whose chart differs from the checkout's: before this chart is
committed that is the last commit that changed it, afterwards the one before.
"""

from __future__ import annotations

import posixpath
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.helm_support import CHART_DIR, REPO_ROOT, coalesced

CHART_PATH = CHART_DIR.relative_to(REPO_ROOT).as_posix()
SYMLINK_MODE = "120000"


class NoHistory(RuntimeError):
    """git, the repository or an earlier chart version is not available here."""


def _git(*args: str) -> bytes:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO_ROOT), *args], capture_output=True, check=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise NoHistory(f"git {' '.join(args)}: {exc}") from exc
    return done.stdout


@dataclass(frozen=True)
class ChartVersion:
    commit: str
    files: dict[str, bytes]  # path relative to the chart -> content (symlinks resolved)

    def write(self, dest: Path) -> Path:
        """The chart's files under ``dest``, ready for `helm_python.Chart.load`."""
        for name, content in self.files.items():
            path = dest / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        return dest


def _files_at(commit: str) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    listing = _git("ls-tree", "-r", "-z", commit, "--", CHART_PATH).split(b"\0")
    for entry in filter(None, listing):
        meta, path = entry.decode().split("\t", 1)
        mode, _, blob = meta.split()
        content = _git("cat-file", "blob", blob)
        if mode == SYMLINK_MODE:  # a symlink: the file it points at in the same commit
            target = posixpath.normpath(posixpath.join(posixpath.dirname(path), content.decode()))
            content = _git("show", f"{commit}:{target}")
        files[posixpath.relpath(path, CHART_PATH)] = content
    return files


def _checkout_files() -> dict[str, bytes]:
    return {
        p.relative_to(CHART_DIR).as_posix(): p.read_bytes()
        for p in sorted(CHART_DIR.rglob("*"))
        if p.is_file()
    }


def previous_version() -> ChartVersion:
    """The newest committed chart that differs from the checkout's; NoHistory if none."""
    current = _checkout_files()
    for commit in _git("log", "--format=%H", "--", CHART_PATH).decode().split():
        files = _files_at(commit)
        if files != current:
            return ChartVersion(commit, files)
    raise NoHistory(f"no commit holds a {CHART_PATH} that differs from the checkout's")


def every_version() -> list[tuple[str, ChartVersion]]:
    """(Chart.yaml version, its newest commit's chart) of every version in git history that
    differs from the checkout's, newest first; NoHistory if there is none."""
    current = _checkout_files()
    found: dict[str, ChartVersion] = {}
    for commit in _git("log", "--format=%H", "--", CHART_PATH).decode().split():
        meta = yaml.safe_load(_git("show", f"{commit}:{CHART_PATH}/Chart.yaml"))
        version = str(meta["version"])
        if version in found:
            continue
        files = _files_at(commit)
        if files != current:
            found[version] = ChartVersion(commit, files)
    if not found:
        raise NoHistory(f"no commit holds a {CHART_PATH} that differs from the checkout's")
    return list(found.items())


def reuse_values_chart(dest: Path, previous: Path, user_values: dict[str, object]) -> Path:
    """This chart as `helm upgrade --reuse-values` renders it over a release of ``previous``:
    Helm replaces the new chart's values.yaml with the old chart's defaults coalesced with the
    release's user-supplied values (helm.sh/helm/v4 pkg/action/upgrade.go, reuseValues)."""
    shutil.copytree(CHART_DIR, dest, symlinks=False)
    (dest / "values.yaml").write_text(yaml.safe_dump(coalesced(previous, user_values)))
    return dest
