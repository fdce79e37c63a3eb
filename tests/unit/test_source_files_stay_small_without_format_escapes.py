"""Every Python file of the project stays within 400 lines, and none does it by squeezing lines
past the formatter with ``# fmt: skip``: a file that grows is split by job instead."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: generated gRPC stubs are not written by hand
GENERATED = REPO / "src/erdma/api"
LIMIT = 400


def _python_files() -> list[Path]:
    roots = [REPO / name for name in ("src", "tests", "bench", "scripts")]
    return sorted(
        path
        for root in roots
        for path in root.rglob("*.py")
        if GENERATED not in path.parents or path.parent == GENERATED
    )


@pytest.fixture(scope="module")
def files() -> list[Path]:
    found = _python_files()
    assert len(found) > 300, "the walk found too few files to mean anything"
    return found


def test_no_file_is_longer_than_400_lines(files: list[Path]) -> None:
    long = {
        str(p.relative_to(REPO)): n for p in files if (n := len(p.read_text().splitlines())) > LIMIT
    }
    assert not long, f"split these by job: {long}"


def test_no_file_escapes_the_formatter(files: list[Path]) -> None:
    escapes = [
        f"{p.relative_to(REPO)}:{i}"
        for p in files
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if line.rstrip().endswith("# fmt" + ": skip")
    ]
    assert not escapes, f"format these and split the file if it grows: {escapes}"
