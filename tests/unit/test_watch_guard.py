"""The watch guard's seam into kopf, and how it counts an outage.

The guard replaces one function of kopf's watcher; if kopf renames or reshapes it, these tests
fail before a watch error can end the controller again.
"""

from __future__ import annotations

import inspect
import logging

from kopf._cogs.clients import watching

from erdma.controller import watch_guard
from erdma.controller.handlers import KOPF_REQUEST_RETRIES, operator_settings
from erdma.controller.watch_guard import OUTAGE_AFTER, SETTLED_AFTER, WatchHealth, guarding


def test_kopf_still_runs_each_list_and_watch_cycle_through_the_guarded_function():
    source = inspect.getsource(watching.infinite_watch)
    assert "continuous_watch(" in source
    # kopf's own function, also when a controller earlier in this process installed the guard
    kopfs = watch_guard._original or watching.continuous_watch
    params = inspect.signature(kopfs).parameters
    assert {"settings", "resource", "namespace", "operator_pause_waiter"} <= set(params)
    assert "WatchingError" in dir(watching) and hasattr(watching.Bookmark, "LISTED")


def test_guarding_installs_the_wrapper_and_forgets_the_operator_afterwards():
    settings, health = operator_settings(), WatchHealth()
    with guarding(settings, health):
        assert watching.continuous_watch is watch_guard._guarded_watch
        assert watch_guard._guarded[id(settings)] is health
    assert id(settings) not in watch_guard._guarded


def test_a_watch_settles_only_after_kopf_gave_up_retrying_a_failing_request():
    assert sum(KOPF_REQUEST_RETRIES) < SETTLED_AFTER
    assert operator_settings().networking.error_backoffs == KOPF_REQUEST_RETRIES


def test_one_failure_is_routine_and_a_second_in_a_row_is_an_outage_warned_once(caplog):
    caplog.set_level(logging.DEBUG, logger="erdma")
    health = WatchHealth()
    health.failed("nodes", "HTTP 410: Gone")
    assert health.problem() == ""
    for _ in range(4):
        health.failed("nodes", "HTTP 403: Forbidden")
    assert "the watch of nodes has failed 5 times" in health.problem()
    assert "HTTP 403" in health.problem()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "HTTP 403" in warnings[0].getMessage()
    health.delivered("nodes")
    assert health.problem() == ""
    assert "works again after 5 failed attempts" in caplog.records[-1].getMessage()


def test_the_pause_before_a_re_list_grows_with_the_failures():
    health = WatchHealth()
    pauses = [health.failed("nodes", "expired") for _ in range(6)]
    initial = health.backoff.initial
    for n, pause in enumerate(pauses):
        ceiling = min(health.backoff.maximum, initial * 2**n)
        assert ceiling / 2 <= pause <= ceiling
    assert OUTAGE_AFTER == 2


def test_a_stopped_operator_leaves_no_outage_behind():
    health = WatchHealth()
    for _ in range(3):
        health.failed("erdmadevices", "HTTP 404: NotFound")
    health.stopped()
    assert health.problem() == ""
