"""No test bounds a measured duration from above: such a test fails on a loaded machine.

Speed is measured in ``bench/`` (results in bench/RESULTS.md); tests assert order, counts and
outcomes. The checker lives in ``tests/duration_asserts.py``; these tests also show what it
catches and what it lets through, so the guard itself can fail.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.duration_asserts import find, find_all

TESTS = Path(__file__).resolve().parents[1]


def test_the_suite_has_no_duration_assertion():
    found = find_all(TESTS)
    assert not found, "duration assertions (move timings to bench/):\n" + "\n".join(map(str, found))


def _findings(tmp_path: Path, code: str) -> list[str]:
    path = tmp_path / "test_sample.py"
    path.write_text(textwrap.dedent(code))
    return [f.source for f in find(path)]


EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "duration_asserts"


def _examples(name: str) -> list[str]:
    """The code samples of ``<name>.txt``, one per ``# ---- next example ----`` section. They
    live in a data file so that the samples of what is caught are not themselves test code."""
    return (EXAMPLES / f"{name}.txt").read_text().split("\n# ---- next example ----\n")


@pytest.mark.parametrize("code", _examples("caught"))
def test_an_upper_bound_on_a_measured_time_is_found(tmp_path, code):
    assert _findings(tmp_path, code), code


@pytest.mark.parametrize("code", _examples("allowed"))
def test_orders_lower_bounds_and_counts_are_allowed(tmp_path, code):
    assert not _findings(tmp_path, code), code
