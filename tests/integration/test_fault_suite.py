"""The fault suite's short version: every scenario of bench/chaos with a few trials.

`make chaos` runs the same scenarios with full trial counts and publishes the table in
docs/reliability.md; running them here as well makes a regression in any of them fail CI.
"""

from __future__ import annotations

import pytest

from bench.chaos.__main__ import main
from bench.chaos.framework import Scenario, Trials, load_all

SCENARIOS = load_all()


@pytest.mark.parametrize("item", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario_holds(item: Scenario) -> None:
    trials = item.run(short=True)
    if trials.unavailable:
        pytest.skip(trials.unavailable)
    assert not trials.failures, f"{item.name}: " + "; ".join(trials.failures[:5])
    assert trials.held == trials.count


def test_a_scenario_that_does_not_hold_fails_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.chaos import framework

    def broken(trials: framework.Trials) -> None:
        for index in range(trials.count):
            trials.check(index == 0, f"trial {index} broke on purpose")

    framework.REGISTRY.append(
        Scenario("self-check: breaks on purpose", "suite", 3, 2, "never", broken)
    )
    try:
        assert main(["--short", "--only", "self-check"]) == 1
    finally:
        framework.REGISTRY.pop()
    out = capsys.readouterr()
    assert "| 2 | 1/2 |" in out.out
    assert "trial 1 broke on purpose" in out.err


def test_unknown_only_filter_names_the_scenarios() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--short", "--only", "no-such-scenario"])
    assert "matches no scenario" in str(exc.value)


def test_a_scenario_the_machine_cannot_run_says_what_is_missing() -> None:
    """No etcd here: the scenario is not run (the suite skips it with this reason) rather than
    failing as if the system had not held."""
    from tests.fakes.kubeapi import KubeApiUnavailable

    def needs_etcd(trials: Trials) -> None:
        raise KubeApiUnavailable("etcd is not installed")

    trials = Scenario("needs etcd", "suite", 1, 1, "never", needs_etcd).run(short=True)
    assert trials.unavailable == "real Kubernetes API server unavailable: etcd is not installed"
    assert trials.held == 0 and trials.failures == [trials.unavailable]  # `make chaos` fails
