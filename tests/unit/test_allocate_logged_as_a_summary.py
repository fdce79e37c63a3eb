"""Allocate is logged at debug per call and, at info, as one summary line a minute at most: a
busy node's log shows that Allocate is answered without a line (and its cost) per call."""

from __future__ import annotations

import logging

from erdma.deviceplugin.allocation_log import AllocationLog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def info_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.INFO]


def test_calls_within_a_minute_write_no_info_line(caplog):
    caplog.set_level(logging.INFO, logger="erdma.deviceplugin.allocation_log")
    clock = Clock()
    allocations = AllocationLog(clock=clock)
    for _ in range(500):
        allocations.allocated("aliyun/erdma", [["erdma_0/0"]])
    assert info_lines(caplog) == []


def test_the_first_call_after_a_minute_writes_the_counts_per_resource(caplog):
    caplog.set_level(logging.INFO, logger="erdma.deviceplugin.allocation_log")
    clock = Clock()
    allocations = AllocationLog(clock=clock)
    for _ in range(3):
        allocations.allocated("aliyun/erdma", [["erdma_0/0"]])
    allocations.allocated("rdma/hca", [["hca-0"]])
    clock.now += 60
    allocations.allocated("aliyun/erdma", [["erdma_0/1"]])
    (line,) = info_lines(caplog)
    assert line.getMessage() == "Allocate calls answered"
    assert line.__dict__["calls"] == {"aliyun/erdma": 4, "rdma/hca": 1}
    assert line.__dict__["seconds"] == 60.0
    clock.now += 30
    allocations.allocated("aliyun/erdma", [["erdma_0/2"]])
    assert len(info_lines(caplog)) == 1  # counting starts again


def test_each_call_is_at_debug_with_what_was_asked(caplog):
    caplog.set_level(logging.DEBUG, logger="erdma.deviceplugin.allocation_log")
    AllocationLog(clock=Clock()).allocated("aliyun/erdma", [["erdma_0/0", "erdma_1/0"]])
    (line,) = caplog.records
    asked = line.__dict__["container_requests"]
    assert line.levelno == logging.DEBUG and asked == [["erdma_0/0", "erdma_1/0"]]
