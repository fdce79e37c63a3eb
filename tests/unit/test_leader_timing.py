"""The elector's timing: client-go's defaults, and a clear error for settings that are unsafe.

``renew_deadline < duration`` is what keeps two leaders from overlapping (a leader gives up before
a standby may take over), so a bad value must fail at construction, naming what was wrong.
"""

from __future__ import annotations

import math

import pytest

from erdma.kube.leader import LeaderElector


def elector(duration: float = 15.0, **timing: float) -> LeaderElector:
    return LeaderElector(None, "kube-system", "lease", "me", duration, **timing)  # type: ignore[arg-type]


def test_defaults_are_client_go_proportions() -> None:
    default = elector()
    assert (default.duration, default.renew_deadline, default.retry_period) == (15.0, 10.0, 2.0)
    smallest = elector(2)  # the config's minimum leaseDurationSeconds is still valid
    assert smallest.renew_deadline == pytest.approx(4 / 3)
    assert smallest.retry_period == pytest.approx(4 / 15)


def test_explicit_timing_is_kept() -> None:
    custom = elector(6, renew_deadline=4, retry_period=0.5)
    assert (custom.renew_deadline, custom.retry_period) == (4, 0.5)


@pytest.mark.parametrize(
    ("duration", "timing", "message"),
    [
        (0, {}, r"duration \(leaseDurationSeconds\)=0 is invalid; accepted: seconds > 0"),
        (-5, {}, r"duration \(leaseDurationSeconds\)=-5 is invalid"),
        (math.nan, {"renew_deadline": 1, "retry_period": 0.1}, r"duration .*=nan"),
        (15, {"renew_deadline": 15}, r"renew_deadline=15 is invalid; accepted: 0 < renew_deadline"),
        (15, {"renew_deadline": 20}, r"renew_deadline=20 .* < duration \(15\)"),
        (15, {"renew_deadline": 0}, r"renew_deadline=0 is invalid"),
        (15, {"retry_period": 10}, r"retry_period=10 is invalid; accepted: 0 < retry_period"),
        (15, {"retry_period": -1}, r"retry_period=-1 .* < renew_deadline \(10\.0\)"),
        (15, {"retry_period": math.inf}, r"retry_period=inf is invalid"),
    ],
)
def test_bad_timing_names_key_value_and_what_is_accepted(
    duration: float, timing: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        elector(duration, **timing)
