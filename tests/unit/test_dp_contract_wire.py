"""The kubelet-contract helpers in deviceplugin.convert, without gRPC (issue 13, items 7 and 8)."""

from __future__ import annotations

import pytest

from erdma.deviceplugin.convert import (
    check_allocate,
    check_preferred,
    describe_ids,
    device_list_to_pb,
    list_message_size,
    settle_preferred,
)
from erdma.deviceplugin.plugin import AllocationError, PluginDevice


@pytest.mark.parametrize(
    "devices",
    [
        [],
        [PluginDevice("a")],
        [PluginDevice(f"erdma_{d}/{s}", bool(s % 2), (d,)) for d in range(3) for s in range(500)],
        [PluginDevice("x" * 63, False, (2**62, 0, 7)), PluginDevice("é/1", True, ())],
    ],
)
def test_list_message_size_is_the_encoded_size(devices):
    assert list_message_size(devices) == device_list_to_pb(devices).ByteSize()


def test_describe_ids_groups_slots_and_counts_unhealthy():
    devices = [PluginDevice(f"erdma_0/{i}", i != 0) for i in range(3)] + [PluginDevice("t")]
    assert describe_ids(devices) == "4 IDs (1 Unhealthy): erdma_0/* (3), t"
    assert describe_ids([]) == "no devices"


def test_check_allocate_names_every_problem_once():
    advertised = [PluginDevice("a/0"), PluginDevice("a/1", healthy=False)]
    health = {d.id: d.healthy for d in advertised}
    with pytest.raises(AllocationError) as error:
        check_allocate("r", [["a/0", "a/9", "a/1"], ["a/0", "a/9"]], health, advertised)
    assert str(error.value) == (
        "r: refusing Allocate: 'a/9' was never advertised; 'a/1' is Unhealthy; "
        "'a/0' is requested more than once; 'a/9' is requested more than once; "
        "advertised: 2 IDs (1 Unhealthy): a/* (2)"
    )
    check_allocate("r", [["a/0"], []], health, advertised)  # fine: nothing raised


@pytest.mark.parametrize(
    ("available", "must", "size"),
    [(["a"], [], 2), (["a"], ["b"], 1), (["a", "b"], ["a", "b"], 1), (["a"], [], -1)],
)
def test_impossible_preferred_requests_raise(available, must, size):
    with pytest.raises(AllocationError, match="refusing GetPreferredAllocation"):
        check_preferred("r", available, must, size)


def test_settle_prefers_known_ids_and_fills_from_available():
    assert settle_preferred(["s", "a", "b"], [], 2, ["zz", "s", "s"], {"a", "b"}) == ["a", "b"]
    assert settle_preferred(["s", "a"], ["a"], 2, [], {"a"}) == ["a", "s"]
    assert settle_preferred(["a", "b"], [], 0, ["a"], {"a"}) == []
