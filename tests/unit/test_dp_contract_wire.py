"""The kubelet-contract helpers in deviceplugin.convert, without gRPC (issue 13, items 7 and 8)."""

from __future__ import annotations

import pytest

from erdma.deviceplugin.convert import (
    MAX_REFUSAL_BYTES,
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
    ("available", "must", "size", "why"),
    [
        (["a"], [], 2, "more than the 1 available IDs this plugin advertised"),
        (["a"], ["b"], 1, "must-include IDs ['b'] are not among the available IDs"),
        (["a", "b"], ["a", "b"], 1, "2 must-include IDs do not fit allocation_size 1"),
        (["a"], [], -1, "allocation_size -1 is negative"),
        (["a", "zzz/2"], ["zzz/2"], 1, "must-include IDs ['zzz/2'] were never advertised"),
        (["a", "erdma_9/1"], [], 2, "more than the 1 available IDs this plugin advertised"),
    ],
)
def test_impossible_preferred_requests_raise(available, must, size, why):
    with pytest.raises(AllocationError, match="refusing GetPreferredAllocation") as error:
        check_preferred("r", available, must, size, advertised={"a", "b"})
    assert why in str(error.value)


def test_a_refusal_naming_thousands_of_ids_stays_short():
    bad = [f"bad_{i}/{i}" for i in range(3000)]
    with pytest.raises(AllocationError) as allocate:
        check_allocate("r", [bad], {}, [PluginDevice("a/0")])
    with pytest.raises(AllocationError) as prefer:
        check_preferred("r", ["a/0", *bad], bad, 3000, advertised={"a/0"})
    for error in (allocate, prefer):
        text = str(error.value)
        assert len(text.encode()) < MAX_REFUSAL_BYTES, text
        assert "bad_0/0" in text and "2995 more" in text  # the first IDs, then a count


def test_settle_prefers_known_ids_and_fills_from_available():
    advertised = {"s", "a", "b"}  # "s" advertised, now Unhealthy
    assert settle_preferred(["s", "a", "b"], [], 2, ["zz", "s"], {"a", "b"}, advertised) == [
        "a",
        "b",
    ]
    assert settle_preferred(["s", "a"], ["a"], 2, [], {"a"}, advertised) == ["a", "s"]
    assert settle_preferred(["a", "b"], [], 0, ["a"], {"a"}, advertised) == []


def test_settle_never_answers_an_id_that_was_never_advertised():
    # the plugin picks one kubelet offered but this plugin never listed: it is passed over
    assert settle_preferred(["x/9", "a", "b"], [], 2, ["x/9"], {"a"}, {"a", "b"}) == ["a", "b"]
