"""Preferred allocation: must-include, packing, NUMA and GPU affinity."""

from __future__ import annotations

import pytest

from erdma.agent.allocation import Placement, device_of, preferred, slot_ids

TWO_NUMA = Placement({"erdma_0": 0, "erdma_1": 1}, {})


def ids(device: str, count: int, start: int = 0) -> list[str]:
    return [f"{device}/{i}" for i in range(start, start + count)]


def test_slot_ids_and_their_device():
    assert slot_ids("erdma_0", 3) == ["erdma_0/0", "erdma_0/1", "erdma_0/2"]
    assert device_of("erdma_0/199") == "erdma_0"


def test_slot_ids_longer_than_kubelet_allows_are_refused():
    with pytest.raises(ValueError, match="at most 63"):
        slot_ids("x" * 60, 200)


def test_must_include_ids_are_kept_and_the_rest_packs_onto_their_device():
    available = ids("erdma_0", 10) + ids("erdma_1", 10)
    got = preferred(available, ["erdma_1/5"], 3, TWO_NUMA)
    assert got[0] == "erdma_1/5"
    assert {device_of(i) for i in got} == {"erdma_1"}
    assert len(got) == 3 and len(set(got)) == 3


def test_a_request_fits_on_one_device_when_one_has_room():
    available = ids("erdma_0", 2) + ids("erdma_1", 10)
    got = preferred(available, [], 4, TWO_NUMA)
    assert {device_of(i) for i in got} == {"erdma_1"}


def test_consecutive_single_slot_requests_spread_over_devices():
    available = ids("erdma_0", 5) + ids("erdma_1", 6)
    assert device_of(preferred(available, [], 1, TWO_NUMA)[0]) == "erdma_1"
    available = ids("erdma_0", 6) + ids("erdma_1", 5)
    assert device_of(preferred(available, [], 1, TWO_NUMA)[0]) == "erdma_0"


def test_a_request_larger_than_any_device_uses_the_fewest_devices():
    placement = Placement({"a": 0, "b": 0, "c": 0}, {})
    available = ids("a", 3) + ids("b", 8) + ids("c", 4)
    got = preferred(available, [], 11, placement)
    assert {device_of(i) for i in got} == {"b", "c"}


def test_gpu_numa_node_is_preferred():
    placement = Placement({"erdma_0": 0, "erdma_1": 1}, {1: 8})
    available = ids("erdma_0", 50) + ids("erdma_1", 10)
    assert device_of(preferred(available, [], 1, placement)[0]) == "erdma_1"


def test_must_include_numa_beats_gpu_preference():
    placement = Placement({"erdma_0": 0, "erdma_1": 1, "erdma_2": 0}, {1: 8})
    available = ids("erdma_0", 1) + ids("erdma_1", 10) + ids("erdma_2", 10)
    got = preferred(available, ["erdma_0/7"], 3, placement)
    assert {device_of(i) for i in got} == {"erdma_0", "erdma_2"}


def test_size_zero_and_duplicates():
    assert preferred(ids("erdma_0", 3), [], 0, TWO_NUMA) == []
    got = preferred(ids("erdma_0", 3), ["erdma_0/1", "erdma_0/1"], 2, TWO_NUMA)
    assert got == ["erdma_0/1", "erdma_0/0"]


def test_not_enough_ids_returns_what_there_is():
    assert len(preferred(ids("erdma_0", 2), [], 5, TWO_NUMA)) == 2


def test_thousands_of_ids_in_order_of_slot_index():
    available = ids("erdma_0", 1000) + ids("erdma_1", 1000)
    got = preferred(list(reversed(available)), [], 3, TWO_NUMA)
    assert got == ["erdma_0/0", "erdma_0/1", "erdma_0/2"]
