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


@pytest.mark.parametrize(
    "code",
    [
        "import time\nt0 = time.monotonic()\nassert time.monotonic() - t0 < 1.0\n",
        "import time\nt0 = time.monotonic()\nelapsed = time.monotonic() - t0\nassert elapsed < 1\n",
        "import time\nfirst = time.time()\nsecond = time.time()\n"
        "assert 0.1 <= second - first <= 0.3\n",
        "import time, pytest\nb = time.perf_counter()\nassert b == pytest.approx(0.6, abs=0.05)\n",
        "import time\nclass W:\n    def __init__(self):\n        self.starts = []\n"
        "    def go(self):\n        self.starts.append(time.monotonic())\n"
        "w = W()\ncut = 0\nassert w.starts[0] - cut <= 3.8\n",
        "gaps = [r.at for r in log]\nassert all(g <= 0.2 for g in gaps)\n",
        "assert 5.0 > took\n",
        "import time\nasync def stopped():\n    t = time.monotonic()\n"
        "    return time.monotonic() - t\nasync def test():\n    assert await stopped() < 5\n",
    ],
)
def test_an_upper_bound_on_a_measured_time_is_found(tmp_path, code):
    assert _findings(tmp_path, code), code


@pytest.mark.parametrize(
    "code",
    [
        # the order of two measured events
        "import time\na = [time.monotonic()]\nb = [time.monotonic()]\nassert a[0] < b[0]\n",
        # a lower bound: "not before", which load cannot break
        "import time\nt0 = time.monotonic()\nwaited = time.monotonic() - t0\n"
        "assert waited >= 4.8\n",
        # a wait with a deadline is a condition, not a duration assertion
        "import time\ndeadline = time.monotonic() + 60\nassert time.monotonic() < deadline\n",
        # counts and outcomes
        "calls = [1, 2]\nassert len(calls) <= 3\n",
    ],
)
def test_orders_lower_bounds_and_counts_are_allowed(tmp_path, code):
    assert not _findings(tmp_path, code), code
